// Drives captchaq's gateway with the official 2captcha JavaScript SDK,
// @2captcha/captcha-solver, changed only as a user would change it: the SDK
// has no base-URL option (v1.3.9); its endpoints are the `in` and `res`
// fields of its exported provider constants
// (src/structs/constants/constants.ts, supportedProviders.twoCaptcha), which
// the Solver reads on every call (src/structs/2captcha.ts, `get in()`).
//
// Env: CAPTCHAQ_GATEWAY (base URL), CAPTCHAQ_KEY (a gateway key),
// POLL_MS (the SDK's polling interval, default 5000 as the SDK's).
// Prints one JSON line per solve: {"kind", "id", "data", "useragent"};
// on an SDK error, {"kind", "error"}.
'use strict';

const base = process.env.CAPTCHAQ_GATEWAY;
const key = process.env.CAPTCHAQ_KEY;
if (!base || !key) {
  console.error('set CAPTCHAQ_GATEWAY and CAPTCHAQ_KEY');
  process.exit(2);
}

// The one change: where the SDK sends its requests.
const { supportedProviders } = require('@2captcha/captcha-solver/dist/structs/constants/constants');
supportedProviders.twoCaptcha.in = base + '/in.php';
supportedProviders.twoCaptcha.res = base + '/res.php';

const { Solver } = require('@2captcha/captcha-solver');
const solver = new Solver(key, Number(process.env.POLL_MS || 5000));

// A 1x1 PNG, base64: the SDK's imageCaptcha takes the image as body.
const png = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==';

const jobs = {
  recaptcha: () => solver.recaptcha({ pageurl: 'https://shop.example/login', googlekey: '6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-' }),
  turnstile: () => solver.cloudflareTurnstile({ pageurl: 'https://shop.example/checkout', sitekey: '0x4AAAAAAABkMYinukE8nzY' }),
  image: () => solver.imageCaptcha({ body: png, numeric: 1 }),
  geetest: () => solver.geetest({ pageurl: 'https://shop.example/login', gt: '022397c99c9f646f6477822485f30404', challenge: 'a66f31a53a6e1d0f7aa0d4b41bd57ac1' }),
  geetest_v4: () => solver.geetestV4({ pageurl: 'https://shop.example/login', captcha_id: 'e392e1d7fd421dc63325744d5a2b9c73' }),
};

async function main() {
  const only = process.argv.slice(2);
  const kinds = only.length ? only : Object.keys(jobs);
  const results = await Promise.all(kinds.map(async (kind) => {
    try {
      const res = await jobs[kind]();
      return { kind, id: String(res.id), data: res.data, useragent: res.useragent || '' };
    } catch (err) {
      return { kind, error: String(err && err.err || err && err.message || err) };
    }
  }));
  for (const r of results) console.log(JSON.stringify(r));
}

main();
