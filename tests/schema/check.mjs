// check.mjs - an independent check of the JSON Schema to GBNF compiler (src/text/schema.c).
//
// For each schema below: compile it with the C compiler (`test_schema --gbnf FILE`), parse the grammar with the
// small GBNF parser here, then
//   1. generate random texts from the grammar (alternatives and repetition counts chosen at random, the cheapest
//      ones past a depth or length budget): every one must parse as JSON and be valid under the schema according
//      to a real validator (ajv 8, with ajv-formats), and be accepted by the matcher here;
//   2. match valid instances (as JSON.stringify writes them, compact and indented): the grammar must accept them;
//   3. match invalid instances: the grammar must refuse them (checks exactness: 101 for 0..100...);
//   4. for integer bounds, every integer around the bounds: accepted exactly when ajv accepts it.
// Schemas that must be refused are compiled too, and their message must name the keyword.
//
// Usage: node tests/schema/check.mjs [N per schema]
//   SCHEMA2GBNF  the driver (default build/test_schema); it is run as `$SCHEMA2GBNF --gbnf FILE`
//   SCHEMA_SEED  the random seed (default 12345)
//   SCHEMA_SHOW  print a few generated texts of the schemas whose name holds this
//   SCHEMA_DUMP  a folder to write NNN.gbnf and NNN.texts (the generated texts, JSON lines) into, to run them
//                through another GBNF engine
//   AJV_PREFIX   where ajv@8 and ajv-formats@3 are installed (default .cache/npm-ajv), e.g. with
//                npm install --no-save --prefix .cache/npm-ajv ajv@8 ajv-formats@3
import { execFileSync } from "node:child_process";
import { createRequire } from "node:module";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), "../..");
const DRIVER = process.env.SCHEMA2GBNF || path.join(ROOT, "build/test_schema");
const AJV_PREFIX = path.resolve(ROOT, process.env.AJV_PREFIX || ".cache/npm-ajv");
const N = Number(process.argv[2] || 200);
const SHOW = process.env.SCHEMA_SHOW; // print some generated texts of the schemas whose name holds it
const DUMP = process.env.SCHEMA_DUMP; // write each grammar and its generated texts (JSON lines) into this folder

const require = createRequire(path.join(AJV_PREFIX, "node_modules/"));
const Ajv2020 = require("ajv/dist/2020").default;
const Ajv07 = require("ajv").default;
const addFormats = require("ajv-formats").default;

// ---------------------------------------------------------------- GBNF parsing (llama.cpp's syntax)

let nextId = 0;
const node = (o) => ((o.id = nextId++), o);

function parseGbnf(text) {
  const rules = new Map();
  let i = 0;
  const fail = (m) => { throw new Error(`gbnf: ${m} at ${i}: ${JSON.stringify(text.slice(i, i + 40))}`); };
  const isWord = (c) => /[a-zA-Z0-9_-]/.test(c);
  const skip = (nl) => {
    while (i < text.length) {
      const c = text[i];
      if (c === " " || c === "\t" || (nl && (c === "\n" || c === "\r"))) i++;
      else if (c === "#") while (i < text.length && text[i] !== "\n") i++;
      else break;
    }
  };
  const hex = (n) => {
    const h = text.slice(i, i + n);
    if (!/^[0-9a-fA-F]+$/.test(h) || h.length !== n) fail("bad hex");
    i += n;
    return parseInt(h, 16);
  };
  const char = () => {
    if (text[i] === "\\") {
      i++;
      const e = text[i++];
      if (e === "x") return hex(2);
      if (e === "u") return hex(4);
      if (e === "U") return hex(8);
      const m = { t: 9, r: 13, n: 10, "\\": 92, '"': 34, "[": 91, "]": 93, "-": 45, "^": 94, "/": 47 };
      if (!(e in m)) fail(`unknown escape \\${e}`);
      return m[e];
    }
    const cp = text.codePointAt(i);
    if (cp === 10 || cp === 13) fail("newline in literal");
    i += cp > 0xffff ? 2 : 1;
    return cp;
  };
  const number = () => {
    const m = /^[0-9]+/.exec(text.slice(i));
    if (!m) fail("expected a number");
    i += m[0].length;
    return Number(m[0]);
  };
  function alternates(nested) {
    const alts = [sequence(nested)];
    while (text[i] === "|") {
      i++;
      skip(nested);
      alts.push(sequence(nested));
    }
    return alts.length === 1 ? alts[0] : node({ t: "alt", alts });
  }
  function sequence(nested) {
    const items = [];
    for (;;) {
      skip(nested);
      const c = text[i];
      if (c === undefined || c === "|" || c === ")" || c === "\n" || c === "\r") break;
      if (c === '"') {
        i++;
        const cps = [];
        while (text[i] !== '"') {
          if (i >= text.length) fail("unterminated literal");
          cps.push(char());
        }
        i++;
        items.push(node({ t: "lit", cps }));
      } else if (c === "[") {
        i++;
        let neg = false;
        if (text[i] === "^") (neg = true), i++;
        const ranges = [];
        while (text[i] !== "]") {
          if (i >= text.length) fail("unterminated class");
          const lo = char();
          let hi = lo;
          if (text[i] === "-" && text[i + 1] !== "]") i++, (hi = char());
          if (hi < lo) fail("bad range");
          ranges.push([lo, hi]);
        }
        i++;
        if (!ranges.length) fail("empty class");
        items.push(node({ t: "cls", neg, ranges }));
      } else if (c === "(") {
        i++;
        skip(true);
        const e = alternates(true);
        skip(true);
        if (text[i] !== ")") fail("expected )");
        i++;
        items.push(e);
      } else if (isWord(c)) {
        let s = i;
        while (isWord(text[i])) i++;
        items.push(node({ t: "ref", name: text.slice(s, i) }));
      } else if (c === "*" || c === "+" || c === "?") {
        i++;
        if (!items.length) fail("repetition of nothing");
        const e = items.pop();
        items.push(node({ t: "rep", e, min: c === "+" ? 1 : 0, max: c === "?" ? 1 : Infinity }));
      } else if (c === "{") {
        i++;
        const min = number();
        let max = min;
        if (text[i] === ",") {
          i++;
          max = text[i] === "}" ? Infinity : number();
        }
        if (text[i] !== "}") fail("expected }");
        i++;
        if (!items.length) fail("repetition of nothing");
        items.push(node({ t: "rep", e: items.pop(), min, max }));
      } else fail(`unexpected ${c}`);
    }
    return items.length === 1 ? items[0] : node({ t: "seq", items });
  }
  skip(true);
  while (i < text.length) {
    const s = i;
    while (isWord(text[i])) i++;
    const name = text.slice(s, i);
    if (!name) fail("expected a rule name");
    skip(false);
    if (text.slice(i, i + 3) !== "::=") fail("expected ::=");
    i += 3;
    skip(false);
    if (rules.has(name)) fail(`rule ${name} twice`);
    rules.set(name, alternates(false));
    skip(true);
  }
  const check = (e) => {
    if (e.t === "ref" && !rules.has(e.name)) throw new Error(`gbnf: undefined rule ${e.name}`);
    (e.items || e.alts || (e.e ? [e.e] : [])).forEach(check);
  };
  rules.forEach(check);
  if (!rules.has("root")) throw new Error("gbnf: no root");
  return rules;
}

// ---------------------------------------------------------------- generating

let seed = Number(process.env.SCHEMA_SEED || 12345);
const rand = () => { // mulberry32
  seed = (seed + 0x6d2b79f5) | 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
};
const pick = (a) => a[Math.floor(rand() * a.length)];

// Characters tried for classes: printable ASCII, controls, and a few beyond (accents, CJK, an emoji, separators).
const POOL = [];
for (let c = 0; c < 128; c++) POOL.push(c);
POOL.push(0xe9, 0xff, 0xa0, 0x4e2d, 0x1f600, 0x2028, 0x2029, 0x3000, 0xfeff, 0x10ffff);

const inClass = (e, cp) => e.ranges.some(([lo, hi]) => cp >= lo && cp <= hi) !== e.neg;

function randomChar(e) {
  if (!e.neg && rand() < 0.5) {
    const [lo, hi] = pick(e.ranges);
    for (let k = 0; k < 20; k++) {
      const cp = lo + Math.floor(rand() * (hi - lo + 1));
      if (cp < 0xd800 || cp > 0xdfff) return cp;
    }
  }
  const ok = POOL.filter((cp) => inClass(e, cp));
  if (ok.length) return pick(ok);
  for (let k = 0; k < 1000; k++) {
    const cp = Math.floor(rand() * 0x110000);
    if ((cp < 0xd800 || cp > 0xdfff) && inClass(e, cp)) return cp;
  }
  throw new Error("no character for a class");
}

// The least depth of rule references each expression needs to finish (Infinity: never).
function heights(rules) {
  const h = new Map([...rules.keys()].map((k) => [k, Infinity]));
  const of = (e) => {
    switch (e.t) {
      case "lit": case "cls": return 0;
      case "ref": return 1 + h.get(e.name);
      case "seq": return Math.max(0, ...e.items.map(of));
      case "alt": return Math.min(...e.alts.map(of));
      case "rep": return e.min === 0 ? 0 : of(e.e);
    }
  };
  for (let changed = true; changed;) {
    changed = false;
    for (const [k, e] of rules) {
      const v = of(e);
      if (v < h.get(k)) h.set(k, v), (changed = true);
    }
  }
  return { h, of };
}

function generate(rules, H) {
  const out = [];
  const budget = 400 + Math.floor(rand() * 1500); // code points before choosing only the cheapest ways
  const gen = (e, depth) => {
    const tight = depth > 12 || out.length > budget;
    switch (e.t) {
      case "lit": out.push(...e.cps); return;
      case "cls": out.push(randomChar(e)); return;
      case "ref":
        if (depth > 400) throw new Error("generation too deep");
        return gen(rules.get(e.name), depth + 1);
      case "seq": for (const x of e.items) gen(x, depth); return;
      case "alt": {
        let alts = e.alts.filter((a) => H.of(a) !== Infinity);
        if (tight) {
          const m = Math.min(...alts.map(H.of));
          alts = alts.filter((a) => H.of(a) === m);
        }
        return gen(pick(alts), depth);
      }
      case "rep": {
        let n = e.min;
        if (!tight) {
          const span = e.max - e.min;
          if (span <= 16) n += Math.floor(rand() * (span + 1));
          else if (rand() < 0.1 && span <= 300) n = e.max;
          else { while (n < e.max && rand() < 0.6) n++; }
        }
        for (let k = 0; k < n; k++) gen(e.e, depth);
        return;
      }
    }
  };
  gen(rules.get("root"), 0);
  return String.fromCodePoint(...out);
}

// ---------------------------------------------------------------- matching (sets of end positions, memoized)

function matcher(rules) {
  return (str) => {
    const cps = Array.from(str, (ch) => ch.codePointAt(0));
    const memo = new Map();
    const ends = (e, pos) => {
      const key = e.id * 1e7 + pos;
      if (memo.has(key)) return memo.get(key);
      memo.set(key, new Set()); // no left recursion: a re-entry here would be one
      let r = new Set();
      switch (e.t) {
        case "lit": {
          let ok = pos + e.cps.length <= cps.length;
          for (let k = 0; ok && k < e.cps.length; k++) ok = cps[pos + k] === e.cps[k];
          if (ok) r.add(pos + e.cps.length);
          break;
        }
        case "cls": if (pos < cps.length && inClass(e, cps[pos])) r.add(pos + 1); break;
        case "ref": r = ends(rules.get(e.name), pos); break;
        case "seq": {
          let cur = new Set([pos]);
          for (const x of e.items) {
            const next = new Set();
            for (const p of cur) for (const q of ends(x, p)) next.add(q);
            cur = next;
          }
          r = cur;
          break;
        }
        case "alt": for (const a of e.alts) for (const q of ends(a, pos)) r.add(q); break;
        case "rep": {
          let cur = new Set([pos]);
          const seen = new Set();
          if (e.min === 0) r.add(pos);
          for (let n = 1; n <= e.max && cur.size; n++) {
            const next = new Set();
            for (const p of cur) for (const q of ends(e.e, p)) if (!(n > e.min && seen.has(q))) next.add(q);
            for (const q of next) { if (n >= e.min) r.add(q); if (n >= e.min) seen.add(q); }
            cur = next;
          }
          break;
        }
      }
      memo.set(key, r);
      return r;
    };
    return ends(rules.get("root"), 0).has(cps.length);
  };
}

// ---------------------------------------------------------------- the schemas

const defs = (d) => d;
const CASES = [
  { name: "person (nested, required and optional, additionalProperties false)",
    schema: { type: "object", properties: {
      name: { type: "string", minLength: 1, maxLength: 20 },
      age: { type: "integer", minimum: 0, maximum: 150 },
      address: { type: "object", properties: {
        street: { type: "string" }, city: { type: "string" },
        zip: { type: "string", pattern: "^[0-9]{5}(-[0-9]{4})?$" } }, required: ["city"], additionalProperties: false },
      tags: { type: "array", items: { type: "string" }, maxItems: 3 } },
      required: ["name", "age"], additionalProperties: false },
    valid: [{ name: "Ann", age: 30 }, { name: "Bo", age: 0, address: { city: "X", zip: "12345-6789" }, tags: ["a", "b"] },
      { name: "é😀", age: 150, tags: [] }],
    invalid: [{ name: "", age: 3 }, { name: "A", age: 151 }, { name: "A", age: 1, extra: 1 }, { age: 1 },
      { name: "A", age: 1, address: { zip: "12345" } }, { name: "A", age: 1, tags: ["a", "b", "c", "d"] },
      { name: "A", age: 1, address: { city: "c", zip: "1234" } }] },
  { name: "open object (extra members)",
    schema: { type: "object", properties: { a: { type: "integer" }, ab: { type: "boolean" }, "": { type: "null" } }, required: ["ab"] },
    valid: [{ ab: true }, { a: 1, ab: false, "": null }, { ab: true, zz: [1, { q: "r" }], "a b": "x" }],
    invalid: [{ a: 1 }, { a: "x", ab: true }] },
  { name: "additionalProperties as a schema",
    schema: { type: "object", properties: { id: { type: "integer" } }, required: ["id"], additionalProperties: { type: "boolean" } },
    valid: [{ id: 1 }, { id: 2, x: true, y: false }], invalid: [{ id: 1, x: 1 }, { x: true }] },
  { name: "only additionalProperties", schema: { type: "object", additionalProperties: { type: "integer", minimum: 0, maximum: 3 } },
    valid: [{}, { a: 0, "b\"c": 3 }], invalid: [{ a: 4 }] },
  { name: "all optional, closed",
    schema: { type: "object", properties: { a: { type: "boolean" }, b: { type: "null" }, c: { type: "number" } }, additionalProperties: false },
    valid: [{}, { a: true }, { b: null }, { a: false, c: -1.5e3 }, { a: true, b: null, c: 0 }], invalid: [{ d: 1 }, { a: 1 }] },
  { name: "required names not declared", schema: { type: "object", required: ["x", "y"], properties: { y: { const: 1 } } },
    valid: [{ y: 1, x: "any" }], invalid: [{ y: 1 }, { x: 1, y: 2 }] },
  { name: "property false", schema: { type: "object", properties: { bad: false, ok: { type: "integer" } } },
    valid: [{}, { ok: 3, other: 1 }], invalid: [{ bad: 1 }] },
  { name: "keys that need escapes",
    schema: { type: "object", properties: { 'we"ird': { type: "integer" }, "sl/ash\\": { type: "boolean" }, "é\n": { type: "null" } }, required: ['we"ird'] },
    valid: [{ 'we"ird': 1 }, { 'we"ird': 1, "sl/ash\\": true, "é\n": null, more: 2 }], invalid: [{}] },
  { name: "array bounds", schema: { type: "array", items: { type: "integer", minimum: 1, maximum: 9 }, minItems: 2, maxItems: 4 },
    valid: [[1, 2], [9, 9, 9, 9]], invalid: [[1], [1, 2, 3, 4, 5], [0, 1], [1, 10]] },
  { name: "prefixItems, items false", schema: { type: "array", prefixItems: [{ type: "string" }, { type: "integer" }], items: false, minItems: 1 },
    valid: [["a"], ["a", 1]], invalid: [[], ["a", 1, 2], [1]] },
  { name: "prefixItems then items, minItems past the prefix",
    schema: { type: "array", prefixItems: [{ const: "a" }], items: { type: "boolean" }, minItems: 3, maxItems: 5 },
    valid: [["a", true, false], ["a", true, true, true, false]], invalid: [["a", true], ["a", 1, true], ["b", true, true]] },
  { name: "draft-07 tuple (items list, additionalItems)", draft: "07",
    schema: { type: "array", items: [{ type: "integer" }, { type: "null" }], additionalItems: { type: "string" }, maxItems: 4 },
    valid: [[], [1], [1, null, "x", "y"]], invalid: [[1, null, 2], [null]] },
  { name: "empty array only", schema: { type: "array", maxItems: 0 }, valid: [[]], invalid: [[1]] },
  { name: "enum of mixed values",
    schema: { enum: ["red", "green", 42, null, true, { a: [1, 2] }, [1, "x"], 'quote"s', "é\u2028", -0.5, 1e21] },
    valid: ["red", 42, null, true, { a: [1, 2] }, [1, "x"], 'quote"s', "é\u2028", -0.5, 1e21], invalid: ["blue", 43, false, { a: [1] }] },
  { name: "enum with type", schema: { type: "string", enum: ["a", 1, "b"] }, valid: ["a", "b"], invalid: [1] },
  { name: "const object", schema: { const: { k: "v", n: [1, 2, { z: null }] } }, valid: [{ k: "v", n: [1, 2, { z: null }] }], invalid: [{ k: "v" }] },
  { name: "anyOf",
    schema: { anyOf: [{ type: "string", maxLength: 3 }, { type: "integer", minimum: 10, maximum: 12 }, { type: "array", items: { type: "null" }, maxItems: 2 }] },
    valid: ["", "abc", 10, 12, [], [null, null]], invalid: ["abcd", 9, 13, [null, null, null], [1]] },
  { name: "oneOf (disjoint branches)",
    schema: { oneOf: [
      { type: "object", properties: { kind: { const: "circle" }, r: { type: "number", minimum: 0 } }, required: ["kind", "r"], additionalProperties: false },
      { type: "object", properties: { kind: { const: "square" }, side: { type: "number", exclusiveMinimum: 0 } }, required: ["kind", "side"], additionalProperties: false }] },
    valid: [{ kind: "circle", r: 0 }, { kind: "square", side: 0.5 }], invalid: [{ kind: "square", side: 0 }, { kind: "circle", r: -1 }] },
  { name: "$ref recursion (a tree)",
    schema: { $defs: { node: { type: "object", properties: { value: { type: "integer" }, children: { type: "array", items: { $ref: "#/$defs/node" }, maxItems: 3 } }, required: ["value"], additionalProperties: false } }, $ref: "#/$defs/node" },
    valid: [{ value: 1 }, { value: 1, children: [{ value: 2, children: [{ value: 3 }] }, { value: 4 }] }], invalid: [{ value: 1, children: [{}] }] },
  { name: "$ref to the root (a list)",
    schema: { type: "object", properties: { name: { type: "string" }, next: { anyOf: [{ $ref: "#" }, { type: "null" }] } }, required: ["name"], additionalProperties: false },
    valid: [{ name: "a" }, { name: "a", next: { name: "b", next: null } }], invalid: [{ name: "a", next: 1 }] },
  { name: "draft-07 definitions", draft: "07",
    schema: { definitions: { pos: { type: "integer", minimum: 1 } }, type: "array", items: { $ref: "#/definitions/pos" } },
    valid: [[], [1, 999999999999999]], invalid: [[0]] },
  { name: "allOf joining objects",
    schema: { allOf: [{ $ref: "#/$defs/base" }, { properties: { b: { type: "integer" } }, required: ["b"] }], $defs: { base: { type: "object", properties: { a: { type: "string" } }, required: ["a"] } } },
    valid: [{ a: "x", b: 1 }, { a: "x", b: 1, c: [] }], invalid: [{ a: "x" }, { b: 1 }] },
  { name: "allOf of one", schema: { allOf: [{ type: "integer", minimum: 5, maximum: 6 }], description: "x" }, valid: [5, 6], invalid: [4, 7] },
  { name: "any value ({})", schema: {}, valid: [1, "a", null, [{}], { a: [true] }], invalid: [] },
  { name: "any value (true)", schema: true, valid: [1, "a", null, [{}], { a: [true] }], invalid: [] },
  { name: "any object (json_object)", schema: { type: "object" }, valid: [{}, { a: 1, b: { c: [] } }], invalid: [[], 1] },
  { name: "type list", schema: { type: ["string", "null"], maxLength: 2 }, valid: [null, "", "ab"], invalid: ["abc", 1] },
  { name: "type list with bounds", schema: { type: ["integer", "boolean"], minimum: 3, maximum: 4 }, valid: [3, 4, true], invalid: [2, 5, 3.5] },
  { name: "types inferred from keywords", schema: { properties: { a: { minimum: 1, maximum: 2 } }, required: ["a"] },
    valid: [{ a: 1 }, { a: 1.5 }, { a: 2 }], invalid: [{ a: 0.5 }, { a: 3 }] },
  // integers
  ...[[0, 100], [-5, 5], [999, 1000], [-1000000000000, 98765432109], [7, null], [null, -3], [0, 0], [-999999999999999, 999999999999999]].map(([lo, hi]) => ({
    name: `integer ${lo ?? "-inf"}..${hi ?? "inf"}`, schema: { type: "integer", ...(lo !== null && { minimum: lo }), ...(hi !== null && { maximum: hi }) },
    ints: [lo ?? -2000, hi ?? 2000], valid: [], invalid: [] })),
  { name: "integer exclusive 0..10", schema: { type: "integer", exclusiveMinimum: 0, exclusiveMaximum: 10 }, ints: [0, 10], valid: [1, 9], invalid: [0, 10] },
  { name: "integer, fractional bounds", schema: { type: "integer", minimum: 0.3, maximum: 7.9, exclusiveMinimum: 1.5 }, ints: [0, 8], valid: [2, 7], invalid: [1, 8] },
  // numbers
  { name: "number 0..1", schema: { type: "number", minimum: 0, maximum: 1 }, valid: [0, 1, 0.5, 1.0, 0.0001], invalid: [-0.1, 1.01, 2, -1] },
  { name: "number (0,1)", schema: { type: "number", exclusiveMinimum: 0, exclusiveMaximum: 1 }, valid: [0.5, 0.999, 0.001], invalid: [0, 1, 1.5] },
  { name: "number -1..1", schema: { type: "number", minimum: -1, maximum: 1 }, valid: [-1, -0.5, 0, 1], invalid: [-1.5, 1.0001] },
  { name: "number >= 0", schema: { type: "number", minimum: 0 }, valid: [0, 12.5, 1e3], invalid: [-1, -0.001] },
  { name: "number < 0", schema: { type: "number", exclusiveMaximum: 0 }, valid: [-1, -0.5], invalid: [0, 3] },
  { name: "number -10..-2", schema: { type: "number", minimum: -10.0, maximum: -2 }, valid: [-10, -2, -5.5], invalid: [-1.9, -10.1, 0] },
  { name: "number 2..3 (draft-07)", draft: "07", schema: { type: "number", minimum: 2, maximum: 3 }, valid: [2, 3, 2.5], invalid: [1, 3.5] },
  // strings
  { name: "string length 2..4", schema: { type: "string", minLength: 2, maxLength: 4 }, valid: ["ab", "a\"\\b", "😀é"], invalid: ["a", "abcde"] },
  { name: "string length >= 3", schema: { type: "string", minLength: 3 }, valid: ["abc", "\n\t\u0001"], invalid: ["ab"] },
  { name: "empty string only", schema: { type: "string", maxLength: 0 }, valid: [""], invalid: ["a"] },
  ...[
    ["^\\d{3}-\\d{4}$", ["555-1234"], ["5551234", "555-12345"]],
    ["^[A-Z][a-z]*( [A-Z][a-z]*)*$", ["Hello World", "A"], ["hello", "Hello  World"]],
    ["^(foo|bar)+$", ["foo", "barfoo"], ["", "fo"]],
    ["abc", ["abc", "xxabcyy", "a\"abc\\"], ["ab", "acb"]],
    ["^a.c$", ["abc", "a\"c", "a😀c"], ["a\nc", "ac"]],
    ["^[^a-z]{2,3}$", ["AB", "1\"\\", "\n\t"], ["a1", "ABCD"]],
    ["\\.json$", ["x.json", ".json"], ["x.jso", "x.json "]],
    ["^\\w+@\\w+\\.com$", ["a_1@b.com"], ["a@b.org", "@b.com"]],
    ["^\\s*$", ["", "  \t\n\u00a0\u2028"], ["x"]],
    ["^[\\u00e9-\\u00ff]+$", ["é", "ÿé"], ["e", ""]],
    ["^(a|b)?c*$", ["", "a", "bccc", "cc"], ["ab", "d"]],
    ["^$", [""], ["a"]],
    ["^x{2}y{1,}z{0,2}$", ["xxy", "xxyyyzz"], ["xy", "xxyzzz"]],
    ["^[\"\\\\/]+$", ["\"", "\\/\""], ["a"]],
    ["^\\S+$", ["a\"b\\"], ["a b", ""]],
    ["^[\\t\\n\\x00-\\x03]+$", ["\t\n\u0000\u0003"], ["\u0004"]],
    ["^\\x41\\u0042\\u{43}\\uD83D\\uDE00$", ["ABC😀"], ["ABC"]],
    ["^(?:a|bc)*?d(?<n>e)?$", ["d", "abcde"], ["e"]],
    ["^(a*)*$", ["", "aaa"], ["b"]],
    ["^a|b$", ["ax", "xb", "a", "b"], ["xa", "bx"]],
    ["^[^]$", ["\n", "x"], ["", "xy"]],
    ["^\\D\\W[\\d\\s-]$", ["a!-", "x 5"], ["1!-"]],
  ].map(([p, valid, invalid]) => ({ name: `pattern ${p}`, schema: { type: "string", pattern: p }, valid, invalid })),
  // formats
  { name: "format date", schema: { type: "string", format: "date" }, valid: ["2024-02-29", "2000-02-29", "1999-12-31"], invalid: ["2023-02-29", "1900-02-29", "2024-13-01", "2024-04-31"] },
  { name: "format time", schema: { type: "string", format: "time" }, valid: ["23:59:59Z", "00:00:00.123+05:30"], invalid: ["24:00:00Z", "12:00:00"] },
  { name: "format date-time", schema: { type: "string", format: "date-time" }, valid: ["2024-01-15T10:30:00Z", "2024-01-15T10:30:00.5-01:00"], invalid: ["2024-01-15 10:30"] },
  { name: "format uuid", schema: { type: "string", format: "uuid" }, valid: ["123e4567-e89b-12d3-a456-426614174000"], invalid: ["123e4567e89b12d3a456426614174000"] },
  { name: "format on a number (annotation)", schema: { type: "integer", format: "date", minimum: 1, maximum: 3 }, valid: [1, 3], invalid: [0] },
  { name: "nested arrays of objects",
    schema: { type: "array", items: { type: "object", properties: { k: { type: "array", items: { type: "array", items: { type: "boolean" }, minItems: 1 } } }, required: ["k"] } },
    valid: [[], [{ k: [] }, { k: [[true], [false, true]] }]], invalid: [[{ k: [[]] }], [{}]] },
  { name: "uniqueItems false is no constraint", schema: { type: "array", uniqueItems: false, items: { type: "integer" } }, valid: [[1, 1]], invalid: [["a"]] },
  { name: "OpenAI-style strict schema",
    schema: { type: "object", properties: { steps: { type: "array", items: { type: "object", properties: { explanation: { type: "string" }, output: { type: "string" } }, required: ["explanation", "output"], additionalProperties: false } }, final_answer: { type: ["string", "null"] } }, required: ["steps", "final_answer"], additionalProperties: false },
    valid: [{ steps: [{ explanation: "e", output: "o" }], final_answer: null }], invalid: [{ steps: [] }] },
];

const MUST_FAIL = [
  [{ type: "object", patternProperties: { "^a": {} } }, "'patternProperties' at the root"],
  [{ properties: { a: { not: { type: "string" } } } }, "'not' at /properties/a"],
  [{ if: { type: "string" }, then: { minLength: 1 } }, "'if'"],
  [{ type: "array", uniqueItems: true }, "'uniqueItems'"],
  [{ type: "number", multipleOf: 2 }, "'multipleOf'"],
  [{ type: "object", minProperties: 1 }, "'minProperties'"],
  [{ type: "array", contains: { type: "string" } }, "'contains'"],
  [{ type: "object", dependentRequired: { a: ["b"] } }, "'dependentRequired'"],
  [{ type: "string", pattern: "^(a)\\1$" }, "backreference"],
  [{ type: "string", pattern: "^(?=a)a$" }, "lookahead"],
  [{ type: "string", pattern: "a^b" }, "'^'"],
  [{ type: "string", pattern: "\\bword" }, "word boundary"],
  [{ type: "string", format: "email" }, "'format' 'email'"],
  [{ type: "number", minimum: 0.5 }, "'minimum' 0.5"],
  [{ $ref: "http://example.com/s.json" }, "'$ref'"],
  [{ $ref: "#" }, "no finite value"],
  [{ $defs: { a: { $ref: "#/$defs/a" } }, $ref: "#/$defs/a" }, "no finite value"],
  [{ $defs: { a: { anyOf: [{ $ref: "#/$defs/a" }, { type: "null" }] } }, $ref: "#/$defs/a" }, "before any text"],
  [{ type: "object", properties: { a: { $ref: "#" } }, required: ["a"] }, "no finite value"],
  [{ type: "array", minItems: 20000 }, "'minItems' 20000"],
  [{ type: "integer", minimum: 10, maximum: 5 }, "no integer"],
];

// ---------------------------------------------------------------- running

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "schema-check-"));
function compile(schema) {
  const file = path.join(tmp, "s.json");
  fs.writeFileSync(file, JSON.stringify(schema));
  try {
    return { gbnf: execFileSync(DRIVER, ["--gbnf", file], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] }) };
  } catch (e) {
    return { error: String(e.stderr || e.message).trim() };
  }
}

function validator(c) {
  const ajv = c.draft === "07" ? new Ajv07({ strict: false }) : new Ajv2020({ strict: false });
  addFormats(ajv);
  return ajv.compile(c.schema);
}

let failures = 0, generated = 0, matchedValid = 0, refusedInvalid = 0, intChecks = 0, schemas = 0;
const problem = (c, msg) => { failures++; console.log(`FAIL ${c.name}: ${msg}`); };

for (const c of CASES) {
  const r = compile(c.schema);
  if (r.error) { problem(c, `not compiled: ${r.error}`); continue; }
  const dump = DUMP && fs.openSync(path.join(DUMP, `${String(schemas).padStart(3, "0")}.texts`), "w");
  if (DUMP) fs.writeFileSync(path.join(DUMP, `${String(schemas).padStart(3, "0")}.gbnf`), r.gbnf);
  let rules;
  try { rules = parseGbnf(r.gbnf); } catch (e) { problem(c, `${e.message}\n${r.gbnf}`); continue; }
  schemas++;
  const validate = validator(c), H = heights(rules), match = matcher(rules);
  let bad = 0;
  for (let k = 0; k < N && bad < 3; k++) {
    const text = generate(rules, H);
    generated++;
    if (SHOW && c.name.includes(SHOW) && k < 6) console.log(`${c.name}: ${JSON.stringify(text)}`);
    if (dump) fs.writeSync(dump, JSON.stringify(text) + "\n");
    let v;
    try { v = JSON.parse(text); } catch { bad++, problem(c, `not JSON: ${JSON.stringify(text)}`); continue; }
    if (!validate(v)) bad++, problem(c, `invalid: ${JSON.stringify(text)} ${JSON.stringify(validate.errors)}`);
    else if (!match(text)) bad++, problem(c, `the matcher refuses a generated text: ${JSON.stringify(text)}`);
  }
  for (const v of c.valid) {
    if (!validate(v)) { problem(c, `test error: ajv refuses valid ${JSON.stringify(v)}`); continue; }
    for (const text of [JSON.stringify(v), JSON.stringify(v, null, 2)]) {
      if (match(text)) matchedValid++;
      else problem(c, `grammar refuses valid ${JSON.stringify(text)}`);
    }
  }
  for (const v of c.invalid) {
    if (validate(v)) { problem(c, `test error: ajv accepts invalid ${JSON.stringify(v)}`); continue; }
    if (match(JSON.stringify(v))) problem(c, `grammar accepts invalid ${JSON.stringify(v)}`);
    else refusedInvalid++;
  }
  if (dump) fs.closeSync(dump);
  if (c.ints) {
    const [lo, hi] = c.ints, near = (x) => Array.from({ length: 61 }, (_, k) => x - 30 + k);
    const values = new Set([...near(lo), ...near(hi), ...near(0), ...near(Math.round((lo + hi) / 2))]);
    for (let k = 0; k < 200; k++) values.add(Math.round(lo + (hi - lo) * rand()));
    for (const v of values) {
      if (Math.abs(v) > 999999999999999) continue;
      intChecks++;
      if (match(String(v)) !== validate(v)) problem(c, `integer ${v}: grammar ${match(String(v))}, ajv ${validate(v)}`);
    }
  }
}

let refused = 0;
for (const [schema, want] of MUST_FAIL) {
  const r = compile(schema);
  if (r.gbnf !== undefined) problem({ name: JSON.stringify(schema) }, "compiled, but must be refused");
  else if (!r.error.includes(want)) problem({ name: JSON.stringify(schema) }, `message ${JSON.stringify(r.error)} lacks ${JSON.stringify(want)}`);
  else refused++;
}
fs.rmSync(tmp, { recursive: true, force: true });

console.log(`schemas ${schemas}/${CASES.length} compiled; ${generated} texts generated, all checked with ajv; ` +
  `${matchedValid} valid texts matched; ${refusedInvalid} invalid refused; ${intChecks} integers compared; ` +
  `${refused}/${MUST_FAIL.length} refusals named the keyword; ${failures} failures`);
process.exit(failures ? 1 : 0);
