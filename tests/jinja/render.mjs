// render.mjs - the reference outputs of the chat-template tests: every template
// rendered with every conversation by @huggingface/jinja (Hugging Face's Jinja).
//
//   node tests/jinja/render.mjs PKG_DIR TEMPLATE_DIR CONV_DIR OUT_DIR
//
// PKG_DIR: where npm installed @huggingface/jinja (tests/jinja/make-fixtures.sh).
// Writes OUT_DIR/<template>.txt, one record per conversation (sorted by name):
//   "=== <conv> ok <bytes>\n" + the output + "\n"   or   "=== <conv> error\n" + message + "\n"
// strftime_now sees a fixed clock (2026-01-15 10:30 local time; run with TZ=UTC),
// the same one tests/test_jinja.c gives the C engine.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [pkgDir, tmplDir, convDir, outDir] = process.argv.slice(2);
const { Template } = await import(pathToFileURL(path.join(pkgDir, "node_modules/@huggingface/jinja/dist/index.js")));

const FIXED = new Date(2026, 0, 15, 10, 30, 0).getTime();
const RealDate = Date;
globalThis.Date = class extends RealDate {
  constructor(...a) { if (a.length === 0) super(FIXED); else super(...a); }
  static now() { return FIXED; }
};

const oneLine = (e) => String(e && e.message ? e.message : e).replace(/\s+/g, " ").slice(0, 300);
const convs = fs.readdirSync(convDir).filter((f) => f.endsWith(".json")).sort();
fs.mkdirSync(outDir, { recursive: true });
for (const tf of fs.readdirSync(tmplDir).filter((f) => f.endsWith(".jinja")).sort()) {
  const text = fs.readFileSync(path.join(tmplDir, tf), "utf8");
  let tmpl = null, perr = null;
  try { tmpl = new Template(text); } catch (e) { perr = e; }
  const parts = [];
  for (const cf of convs) {
    const name = cf.replace(/\.json$/, "");
    const vars = JSON.parse(fs.readFileSync(path.join(convDir, cf), "utf8"));
    try {
      if (perr) throw perr;
      const out = Buffer.from(tmpl.render(vars), "utf8");
      parts.push(Buffer.from(`=== ${name} ok ${out.length}\n`), out, Buffer.from("\n"));
    } catch (e) {
      parts.push(Buffer.from(`=== ${name} error\n${oneLine(e)}\n`));
    }
  }
  fs.writeFileSync(path.join(outDir, tf.replace(/\.jinja$/, ".txt")), Buffer.concat(parts));
}
