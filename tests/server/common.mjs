// common.mjs - what the client tests in this folder share: loading an npm package from the folder npm_pkg
// installed it in (tests/cli_common.sh), and "ok ..." / "FAIL ..." lines with a count of failures.
import { createRequire } from 'node:module';
import path from 'node:path';

// require() rooted in DIR's node_modules
export const need = dir => createRequire(path.join(path.resolve(dir), 'node_modules', 'x.js'));

// check(what, cond, extra): prints a line (extra only on failure); fails() is the count so far
export function checker(prefix = '') {
  let n = 0;
  const check = (what, cond, extra = '') => {
    console.log(`${cond ? 'ok  ' : 'FAIL'} ${prefix}${what}${cond ? '' : ' ' + extra}`);
    if (!cond) n++;
  };
  return { check, fails: () => n };
}
