// web.mjs - drives the chat page of `deltafin serve` (server/web/index.html, served at /) in headless Chromium.
//
//   node web.mjs NPM_PREFIX BASE_URL SHOT_DIR [OTHER_ORIGIN_URL]
//
// NPM_PREFIX/node_modules holds puppeteer-core; the browser is Debian's /usr/bin/chromium (or $PUPPETEER_EXECUTABLE_PATH;
// never downloaded).
// The page loads without console errors or requests elsewhere; Enter sends a message and the answer streams in
// (several pieces); the engine panel counts the tokens; Stop cuts an answer short (marked stopped, it grows no
// more); the conversation survives a reload; a 390 px window has no horizontal overflow; screenshots of both
// widths go to SHOT_DIR; with OTHER_ORIGIN_URL (a page of an origin the server allows with --cors), a page there
// can list the models and stream a chat. A tiny model answers faster than the eye can follow (its whole answer
// may come in one socket read), so for the streaming and stop checks the test plays a slower model: the page's
// fetch of /v1/chat/completions hands the page the server's events one at a time, 60 ms apart (SLOW_SSE below).
// Where the server still sent the whole answer in one event (it finished before the stream was first read), the
// message is asked again in a new chat, at most twice.
// Prints "ok ..." / "FAIL ..." lines; the exit status counts failures.
import { createRequire } from 'node:module';
import path from 'node:path';
import fs from 'node:fs';

const [prefix, base, shotDir, other] = process.argv.slice(2);
if (!prefix || !base || !shotDir) {
  console.error('usage: node web.mjs NPM_PREFIX BASE_URL SHOT_DIR [OTHER_ORIGIN_URL]');
  process.exit(2);
}
const require = createRequire(path.join(path.resolve(prefix), 'node_modules', 'x.js'));
const puppeteer = require('puppeteer-core');
const baseUrl = base.replace(/\/+$/, '');
const origin = new URL(baseUrl).origin;
fs.mkdirSync(shotDir, { recursive: true });

let fails = 0;
const check = (what, cond, extra = '') => {
  console.log(`${cond ? 'ok  ' : 'FAIL'} ${what}${cond ? '' : ' ' + extra}`);
  if (!cond) fails++;
};
const sleep = ms => new Promise(r => setTimeout(r, ms));
// In the page, before its script: while window.__slowSSE is set, a streamed chat's events reach the page one by one,
// 60 ms apart (longer than the page waits between repaints: each is seen); aborting the request (Stop) errors the
// stream at once, as fetch does; window.__sseContent counts the events that carried text.
const SLOW_SSE = () => {
  const realFetch = window.fetch;
  window.fetch = async (url, opts = {}) => {
    const res = await realFetch(url, opts);
    if (!window.__slowSSE || !String(url).endsWith('/v1/chat/completions') || !res.ok || !res.body) return res;
    const src = res.body.getReader(), enc = new TextEncoder(), dec = new TextDecoder();
    let buf = '';
    const body = new ReadableStream({
      start(ctrl) {
        opts.signal?.addEventListener('abort', () => {
          try { ctrl.error(new DOMException('The user aborted a request.', 'AbortError')); } catch {}
          src.cancel().catch(() => {});
        });
      },
      async pull(ctrl) {
        for (;;) {
          const cut = buf.indexOf('\n\n');
          if (cut >= 0) {
            await new Promise(r => setTimeout(r, 60));
            if (opts.signal?.aborted) return;
            const event = buf.slice(0, cut + 2);
            if (/"content":"[^"]/.test(event)) window.__sseContent = (window.__sseContent || 0) + 1;
            ctrl.enqueue(enc.encode(event));
            buf = buf.slice(cut + 2);
            return;
          }
          const { value, done } = await src.read();
          if (done) { if (buf) ctrl.enqueue(enc.encode(buf)); ctrl.close(); return; }
          buf += dec.decode(value, { stream: true });
        }
      },
    });
    return new Response(body, { status: res.status, statusText: res.statusText, headers: res.headers });
  };
};

const browser = await puppeteer.launch({
  executablePath: process.env.PUPPETEER_EXECUTABLE_PATH || '/usr/bin/chromium', headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run', '--no-default-browser-check'],
});
try {
  const page = await browser.newPage();
  await page.evaluateOnNewDocument(SLOW_SSE);
  await page.setViewport({ width: 1280, height: 800 });
  const consoleErrors = [], foreign = [], failed = [];
  page.on('console', m => { if (m.type() === 'error') consoleErrors.push(m.text()); });
  page.on('pageerror', e => consoleErrors.push(String(e)));
  page.on('request', r => { if (!r.url().startsWith('data:') && new URL(r.url()).origin !== origin) foreign.push(r.url()); });
  page.on('requestfailed', r => {
    const why = r.failure() && r.failure().errorText;
    if (why !== 'net::ERR_ABORTED') failed.push(`${r.url()} ${why}`);   // Stop aborts a fetch on purpose
  });
  // the text of the last assistant answer, its length each time it changed, and whether it is still streaming
  const last = () => page.evaluate(() => {
    const m = [...document.querySelectorAll('#messages .msg.assistant')].pop();
    return m ? { text: m.querySelector('.content').textContent, busy: m.getAttribute('aria-busy') === 'true',
                 stopped: m.classList.contains('stopped'), error: m.querySelector('.error')?.textContent || '' } : null;
  });
  const watchGrowth = () => page.evaluate(() => {
    window.__lengths = [];
    new MutationObserver(() => {
      const c = [...document.querySelectorAll('#messages .msg.assistant .content')].pop();
      const n = c ? c.textContent.length : 0;
      if (window.__lengths[window.__lengths.length - 1] !== n) window.__lengths.push(n);
    }).observe(document.getElementById('messages'), { subtree: true, childList: true, characterData: true });
  });
  const metric = id => page.$eval(id, e => e.textContent.trim());
  const num = s => (/^[\d,]+$/.test(s) ? +s.replace(/,/g, '') : NaN);

  // 1. the page
  const res = await page.goto(baseUrl + '/', { waitUntil: 'load' });
  check('GET / answers 200 with HTML', res.ok() && /text\/html/.test(res.headers()['content-type'] || ''),
        `${res.status()} ${res.headers()['content-type']}`);
  await page.waitForFunction(() => /Deltafin/.test(document.title), { timeout: 5000 }).catch(() => {});
  check('its title names Deltafin', /Deltafin/.test(await page.title()), await page.title());
  await page.waitForFunction(() => !/connecting/.test(document.getElementById('model-info').textContent), { timeout: 5000 })
    .catch(() => {});
  const header = await metric('#model-info');
  check('the header shows the model and its context (/props)', /context \d/.test(header), header);
  await page.waitForFunction(() => /^[\d,]+$/.test(document.getElementById('m-gen').textContent.trim()), { timeout: 5000 })
    .catch(() => {});
  const gen0 = num(await metric('#m-gen'));
  check('the engine panel reads /metrics', Number.isFinite(gen0), await metric('#m-gen'));
  check('no console errors on load', consoleErrors.length === 0, JSON.stringify(consoleErrors));
  check('no requests to other hosts', foreign.length === 0, JSON.stringify(foreign));

  // safety of the markdown and the reasoning split, on the page's own functions
  const md = await page.evaluate(() => ({
    evil: renderMarkdown('<img src=x onerror=alert(1)> [a](javascript:alert(1)) **b**'),
    code: renderMarkdown('```js\nlet a = "<b>";\n```'),
    think: splitThink('<think>hmm'), closed: splitThink('plan</think>answer'),
  }));
  check('markdown escapes HTML, refuses javascript: links, renders bold',
        !/<img|href="javascript/i.test(md.evil) && /&lt;img/.test(md.evil) && /<strong>b<\/strong>/.test(md.evil), md.evil);
  check('markdown code block: <pre><code>, escaped, with a copy button',
        /<pre><code class="language-js">let a = &quot;&lt;b&gt;&quot;;<\/code><\/pre>/.test(md.code) && /class="copy"/.test(md.code),
        md.code);
  check('<think> (unclosed, or only closed) goes to the reasoning',
        md.think.reasoning === 'hmm' && md.think.answer === '' && md.closed.reasoning === 'plan' &&
        md.closed.answer === 'answer', JSON.stringify(md));

  // 2. a streamed answer (of at most 64 tokens: the next one must fit in a small context too)
  const setMaxTokens = async n => {
    if (!(await page.$eval('#settings', d => d.open))) await page.click('#settings > summary');
    await page.click('#max-tokens', { clickCount: 3 });
    await page.keyboard.type(String(n));
    return page.evaluate(() => JSON.parse(localStorage.getItem('deltafin.settings')).max_tokens);
  };
  check('max tokens set through the settings input (and kept)', (await setMaxTokens(64)) === '64');
  await page.evaluate(() => { window.__slowSSE = true; });
  // A tiny model can finish its answer before the server's first read of the stream, which then carries it in one
  // event: the page cannot be seen to grow on that answer. Asked again, in a new chat, at most twice, until the
  // server sent it in pieces (the check below is of the page, given pieces).
  let appeared = false, done = false, first = null, lengths = [], pieces = 0;
  for (let attempt = 0; attempt < 3 && pieces < 2; attempt++) {
    if (attempt) await page.click('#new-chat');
    await page.evaluate(() => { window.__sseContent = 0; });
    await watchGrowth();
    await page.click('#prompt');
    await page.keyboard.type('Tell me a story.');
    await page.keyboard.press('Enter');
    appeared = await page.waitForFunction(
      () => document.querySelectorAll('#messages .msg.user').length === 1 &&
            document.querySelectorAll('#messages .msg.assistant').length === 1, { timeout: 5000 }).then(() => true, () => false);
    done = await page.waitForFunction(() => {
      const m = document.querySelector('#messages .msg.assistant');
      return m && m.getAttribute('aria-busy') === 'false' && m.querySelector('.content').textContent.trim().length > 0;
    }, { timeout: 60000, polling: 100 }).then(() => true, () => false);
    first = await last();
    lengths = await page.evaluate(() => window.__lengths);
    pieces = await page.evaluate(() => window.__sseContent);
  }
  check('Enter sends: a user message and an assistant message appear', appeared);
  check('the answer arrives (non-empty text) within 60 s', done && first && first.text.trim().length > 0 && !first.error,
        JSON.stringify(first));
  const grew = lengths.filter(n => n > 0);  // (a model may well end its answer after two tokens: then two steps)
  check(`it streamed: the text grew in ${grew.length} steps (${pieces} pieces sent)`,
        grew.length >= Math.min(3, pieces) && grew.length >= 2, JSON.stringify(lengths));
  check('the user message shows what was typed',
        (await page.$eval('#messages .msg.user .content', e => e.textContent)) === 'Tell me a story.');
  const stats = await page.$eval('#messages .msg.assistant .meta', e => e.textContent);
  check('the answer shows its token count and speed (timings)', /\d+ tokens · [\d.]+ tok\/s/.test(stats), stats);

  // 3. the engine panel counts the tokens
  const counted = await page.waitForFunction(
    g => { const n = +document.getElementById('m-gen').textContent.replace(/,/g, ''); return n > 0 && n > g; },
    { timeout: 8000, polling: 200 }, gen0).then(() => true, () => false);
  check('the engine panel: tokens generated went up, above 0', counted, `${gen0} -> ${await metric('#m-gen')}`);
  const panel = {};
  for (const id of ['m-tps', 'm-last-tps', 'm-mem', 'm-hit', 'm-disk', 'm-slots', 'm-queue', 'm-plan', 'm-plan-hit'])
    panel[id] = await metric('#' + id);
  check('the engine panel: speed, memory, slots, queue shown',
        /tok\/s$/.test(panel['m-last-tps']) && /B/.test(panel['m-mem']) && /^\d+ \/ \d+$/.test(panel['m-slots']) &&
        /^\d+$/.test(panel['m-queue']), JSON.stringify(panel));
  await sleep(1600); // a fresh poll, for the screenshot
  await page.$eval('#panel', e => { e.scrollTop = 0; });
  await page.screenshot({ path: path.join(shotDir, 'web-chat.png') });

  // 4. stop
  check('max tokens set to 400', (await setMaxTokens(400)) === '400');
  await page.click('#prompt');
  await page.keyboard.type('Tell me a long story.');
  await page.keyboard.press('Enter');
  const started = await page.waitForFunction(() => {
    const all = document.querySelectorAll('#messages .msg.assistant');
    return all.length === 2 && all[1].querySelector('.content').textContent.trim().length > 0;
  }, { timeout: 60000, polling: 50 }).then(() => true, () => false);
  check('a second answer starts', started);
  const stopVisible = await page.$eval('#stop', e => !e.hidden && e.offsetParent !== null);
  check('#stop is shown while it generates (and #send hidden)', stopVisible && await page.$eval('#send', e => e.hidden));
  if (stopVisible) await page.click('#stop');
  const stopped = await page.waitForFunction(() => {
    const m = [...document.querySelectorAll('#messages .msg.assistant')].pop();
    return m.classList.contains('stopped') && m.getAttribute('aria-busy') === 'false';
  }, { timeout: 5000 }).then(() => true, () => false);
  const a = await last();
  check('Stop: the answer is marked stopped and keeps its text', stopped && a.text.trim().length > 0 && !a.error,
        JSON.stringify(a));
  await sleep(1500);
  const b = await last();
  check('... and grows no more', a.text === b.text, `${a.text.length} -> ${b.text.length}`);
  check('... the stopped mark is shown', /Stopped/.test(await page.$eval('#messages', e => e.querySelector('.msg.stopped .meta')?.textContent)));
  check('... #send is back', !(await page.$eval('#send', e => e.hidden)));

  // 5. the conversation after a reload
  const before = await page.$$eval('#messages .msg', els => els.map(e => e.className + ':' + e.querySelector('.content').textContent));
  await page.reload({ waitUntil: 'load' });
  await page.waitForSelector('#messages .msg', { timeout: 5000 }).catch(() => {});
  const after = await page.$$eval('#messages .msg', els => els.map(e => e.className + ':' + e.querySelector('.content').textContent));
  check(`after a reload the ${before.length} messages are still there (stopped mark too)`,
        before.length === 4 && JSON.stringify(before) === JSON.stringify(after), JSON.stringify([before, after]).slice(0, 400));
  check('... and the conversation is listed, titled by its first message',
        (await page.$$eval('#chats .conv', els => els.map(e => e.textContent))).includes('Tell me a story.'));
  check('the max tokens setting survived too', (await page.$eval('#max-tokens', e => e.value)) === '400');

  // 6, 7. a narrow window
  await page.setViewport({ width: 390, height: 800 });
  await sleep(300);
  const width = () => page.evaluate(() => document.documentElement.scrollWidth);
  const w1 = await width();
  check('390 px wide: nothing overflows horizontally', w1 <= 390, `scrollWidth ${w1}`);
  await page.screenshot({ path: path.join(shotDir, 'web-chat-narrow.png') });
  await page.click('#toggle-panel');
  const panelShown = await page.$eval('#panel', e => getComputedStyle(e).display !== 'none' && e.getBoundingClientRect().right <= 390);
  const w2 = await width();
  check('390 px wide: the engine panel opens behind its button, inside the window', panelShown && w2 <= 390, `scrollWidth ${w2}`);
  await page.screenshot({ path: path.join(shotDir, 'web-chat-narrow-panel.png') });
  await page.keyboard.press('Escape');
  await page.click('#toggle-chats');
  const chatsShown = await page.$eval('#sidebar', e => getComputedStyle(e).display !== 'none');
  check('390 px wide: the conversations open behind their button', chatsShown && (await width()) <= 390);
  check('shots written', fs.existsSync(path.join(shotDir, 'web-chat.png')) && fs.existsSync(path.join(shotDir, 'web-chat-narrow.png')));
  check('no console errors, no failed requests all along', consoleErrors.length === 0 && failed.length === 0 && foreign.length === 0,
        JSON.stringify({ consoleErrors, failed, foreign }));

  // 8. CORS: a page of another origin (allowed with --cors) uses the API
  if (other) {
    const p2 = await browser.newPage();
    await p2.goto(other, { waitUntil: 'load' });
    const r = await p2.evaluate(async b => {
      const out = {};
      try {
        const m = await fetch(b + '/v1/models');
        out.models = m.status + ' ' + ((await m.json()).data || []).length;
      } catch (e) { out.models = String(e); }
      try {
        const c = await fetch(b + '/v1/chat/completions', {
          method: 'POST', headers: { 'Content-Type': 'application/json' },
          body: JSON.stringify({ messages: [{ role: 'user', content: 'Hi' }], stream: true, max_tokens: 8 }),
        });
        out.status = c.status;
        const reader = c.body.getReader(), dec = new TextDecoder();
        let text = '';
        for (;;) { const { value, done } = await reader.read(); if (done) break; text += dec.decode(value, { stream: true }); }
        out.done = text.includes('data: [DONE]');
        out.chunks = (text.match(/^data: \{/gm) || []).length;
      } catch (e) { out.chat = String(e); }
      return out;
    }, baseUrl);
    check('CORS: a page of another origin lists the models', r.models === '200 1', JSON.stringify(r));
    check('CORS: ... and streams a chat completion', r.status === 200 && r.done && r.chunks > 1, JSON.stringify(r));
    await p2.close();
  }
} catch (e) {
  check('the test ran without an exception', false, String(e && e.stack || e));
} finally {
  await browser.close();
}
process.exit(fails);
