// hub_server.js - a local stand-in for the Hugging Face Hub, for tests/cli/pull.sh (not a test itself).
//   node tests/hub_server.js REPOS.json PORTFILE LOG
// Answers as the Hub's documented endpoints do (hub/hub.c names them):
//   GET /api/models/ORG/REPO/refs                     {"branches":[{"name":"main","targetCommit":C}],"tags":[]}
//   GET /api/models/ORG/REPO/tree/C?recursive=true    the files, two a page, `Link: <...>; rel="next"`
//   GET /ORG/REPO/resolve/C/PATH                      302 to the "CDN": the same port on 127.0.0.2
//   GET /cdn/ORG/REPO/PATH                            the bytes, Range honoured (206 + Content-Range)
// REPOS.json: {"ORG/REPO": {"private": bool, "evil_link": bool, "raw_tree": TEXT (the tree answer), "files": [{"path", "src", "lfs" (default
// true), "bad_sha": bool, "cut": N (the first whole-file answer stops after N bytes), "slow": B (bytes per
// 100 ms), "norange": bool (answers a range with the whole file)}]}}. Private repositories want
// "Authorization: Bearer hf_test", on the API and resolve endpoints only (the CDN never needs it).
// Every request is logged as a JSON line {host, url, range, auth}. The port goes to PORTFILE once listening.
const http = require('http');
const fs = require('fs');
const crypto = require('crypto');
const [, , reposFile, portFile, logFile] = process.argv;
const repos = JSON.parse(fs.readFileSync(reposFile, 'utf8'));
const TOKEN = 'Bearer hf_test';
const cut = new Set(); // files whose first whole answer was cut already

for (const [id, r] of Object.entries(repos)) {
    r.commit = crypto.createHash('sha1').update(id).digest('hex');
    for (const f of r.files) {
        const data = fs.readFileSync(f.src);
        f.size = data.length;
        f.sha256 = crypto.createHash('sha256').update(f.bad_sha ? Buffer.concat([data, Buffer.from('x')]) : data).digest('hex');
        f.gitoid = crypto.createHash('sha1').update(Buffer.concat([Buffer.from(`blob ${data.length}\0`), data])).digest('hex');
    }
}

function json(res, code, obj, headers = {}) {
    res.writeHead(code, Object.assign({ 'Content-Type': 'application/json' }, headers));
    res.end(JSON.stringify(obj));
}

function treeEntries(r) {
    const out = [], dirs = new Set();
    for (const f of r.files) {
        const parts = f.path.split('/');
        for (let i = 1; i < parts.length; i++) {
            const d = parts.slice(0, i).join('/');
            if (!dirs.has(d)) dirs.add(d), out.push({ type: 'directory', oid: '0'.repeat(40), size: 0, path: d });
        }
        const e = { type: 'file', oid: f.gitoid, size: f.size, path: f.path };
        if (f.lfs !== false) e.lfs = { oid: f.sha256, size: f.size, pointerSize: 134 };
        out.push(e);
    }
    return out;
}

function sendFile(req, res, f) {
    const data = fs.readFileSync(f.src);
    let from = 0;
    const m = /^bytes=(\d+)-$/.exec(req.headers.range || '');
    if (m && !f.norange) {
        from = Number(m[1]);
        if (from >= data.length) {
            res.writeHead(416, { 'Content-Range': `bytes */${data.length}` });
            return res.end();
        }
        res.writeHead(206, { 'Content-Length': data.length - from, 'Accept-Ranges': 'bytes',
                             'Content-Range': `bytes ${from}-${data.length - 1}/${data.length}` });
    } else {
        res.writeHead(200, { 'Content-Length': data.length, 'Accept-Ranges': 'bytes' });
    }
    let body = data.subarray(from);
    if (f.cut && !m && !cut.has(f.path)) { // a dropped connection, part way
        cut.add(f.path);
        res.write(body.subarray(0, f.cut), () => setTimeout(() => res.socket.destroy(), 50));
        return;
    }
    if (!f.slow) return res.end(body);
    const step = () => {
        if (res.destroyed) return;
        const chunk = body.subarray(0, f.slow);
        body = body.subarray(f.slow);
        if (!body.length) return res.end(chunk);
        res.write(chunk);
        setTimeout(step, 100);
    };
    step();
}

function handle(req, res) {
    const url = new URL(req.url, 'http://x');
    const auth = req.headers.authorization || '';
    fs.appendFileSync(logFile, JSON.stringify({ host: req.headers.host, url: req.url, range: req.headers.range || '',
                                                auth: auth ? (auth === TOKEN ? 'good' : 'bad') : 'none' }) + '\n');
    const port = req.socket.localPort;
    let m;
    if ((m = /^\/cdn\/([^/]+\/[^/]+)\/(.+)$/.exec(url.pathname))) {
        const r = repos[m[1]], path = decodeURIComponent(m[2]);
        const f = r && r.files.find(x => x.path === path);
        return f ? sendFile(req, res, f) : json(res, 404, { error: 'Entry not found' });
    }
    if ((m = /^\/api\/models\/([^/]+\/[^/]+)\/(refs|tree\/([0-9a-f]+))$/.exec(url.pathname)) ||
        (m = /^\/([^/]+\/[^/]+)\/resolve\/([0-9a-f]+)\/(.+)$/.exec(url.pathname))) {
        const id = m[1], r = repos[id];
        if (!r) return json(res, 404, { error: 'Repository not found' });
        if (r.private && auth !== TOKEN)
            return json(res, 401, { error: auth ? 'Invalid credentials in Authorization header' : 'Access to this repository is restricted.\u001b[31m' });
        if (url.pathname.startsWith('/api/')) {
            if (m[2] === 'refs') return json(res, 200, { branches: [{ name: 'main', ref: 'refs/heads/main', targetCommit: r.commit }], tags: [], converts: [] });
            if (m[3] !== r.commit) return json(res, 404, { error: 'Invalid rev id' });
            if (r.raw_tree !== undefined) { // a malformed answer, as given
                res.writeHead(200, { 'Content-Type': 'application/json' });
                return res.end(r.raw_tree);
            }
            const all = treeEntries(r), at = Number(url.searchParams.get('cursor') || 0), page = all.slice(at, at + 2);
            const headers = {};
            if (at + 2 < all.length) {
                const host = r.evil_link ? `127.0.0.2:${port}` : req.headers.host;
                headers.Link = `<http://${host}/api/models/${id}/tree/${r.commit}?recursive=true&cursor=${at + 2}>; rel="next"`;
            }
            return json(res, 200, page, headers);
        }
        if (m[2] !== r.commit) return json(res, 404, { error: 'Invalid rev id' });
        res.writeHead(302, { Location: `http://127.0.0.2:${port}/cdn/${id}/${m[3]}?X-Amz-Signature=abc` });
        return res.end();
    }
    json(res, 404, { error: 'Not found' });
}

// the API on 127.0.0.1, the "CDN" (another host to a client) on 127.0.0.2, one port
const api = http.createServer(handle), cdn = http.createServer(handle);
api.listen(0, '127.0.0.1', () => {
    const port = api.address().port;
    cdn.listen(port, '127.0.0.2', () => fs.writeFileSync(portFile, String(port)));
});
