// Drives captchaq's gateway in the JSON task dialect with two official
// clients nobody here wrote, each pointed at the gateway by the least
// intrusive means it allows:
//
//   - @zennolab_com/capmonstercloud-client (CapMonster Cloud): its own
//     knob, ClientOptions' serviceUrl (src/ClientOptions.ts: "capmonster.cloud
//     API URI. By default https://api.capmonster.cloud");
//   - @antiadmin/anticaptchaofficial (Anti-Captcha): no knob; it posts to
//     the literal 'https://api.anti-captcha.com/' + method with the axios it
//     requires (index.js, JSONRequest), so a request interceptor of axios's
//     own documented API (axios.interceptors.request.use) rewrites that
//     origin to the gateway's. Nothing of the client is patched.
//
// Env: CAPTCHAQ_GATEWAY (base URL), CAPTCHAQ_KEY (a gateway key).
// Arguments: the jobs to run (default: every solving job).
// Prints one JSON line per job: {"sdk", "kind", "taskId", "solution"} or,
// when the client reports an error, {"sdk", "kind", "error"}.
'use strict';

const base = process.env.CAPTCHAQ_GATEWAY;
const key = process.env.CAPTCHAQ_KEY;
if (!base || !key) {
  console.error('set CAPTCHAQ_GATEWAY and CAPTCHAQ_KEY');
  process.exit(2);
}

const cm = require('@zennolab_com/capmonstercloud-client');
const capmonster = cm.CapMonsterCloudClientFactory.Create(new cm.ClientOptions({ clientKey: key, serviceUrl: base }));
// The client's own knob for polling (Solve's resultTimeouts, src/GetResultTimeouts.ts), made quick for the emulator.
const quick = { firstRequestDelay: 50, requestsInterval: 50, timeout: 30000 };

const axios = require('axios');
axios.interceptors.request.use((config) => {
  config.url = config.url.replace('https://api.anti-captcha.com', base);
  return config;
});
const ac = require('@antiadmin/anticaptchaofficial');
ac.setAPIKey(key);
ac.shutUp();
ac.settings.firstAttemptWaitingInterval = 0.05;
ac.settings.normalWaitingInterval = 0.05;

const site = 'https://shop.example/login';
// A PNG of 200 bytes (its signature and zeros): an image the emulator reads.
const png = Buffer.concat([Buffer.from('89504e470d0a1a0a', 'hex'), Buffer.alloc(200)]).toString('base64');

// CapMonster's Solve answers the solution without the taskId: the test
// matches it by content against captchaq's outcomes.
const capmonsterJobs = {
  recaptcha: () => new cm.RecaptchaV2Request({ websiteURL: site, websiteKey: '6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-' }),
  turnstile: () => new cm.TurnstileRequest({ websiteURL: site, websiteKey: '0x4AAAAAAABkMYinukE8nzY' }),
  geetest: () => new cm.GeeTestRequest({ websiteURL: site, gt: '022397c99c9f646f6477822485f30404', challenge: 'a66f31a53a6e1d0f7aa0d4b41bd57ac1' }),
  geetest_v4: () => new cm.GeeTestRequest({ websiteURL: site, gt: 'e392e1d7fd421dc63325744d5a2b9c73', version: '4' }),
  image: () => new cm.ImageToTextRequest({ body: png, numeric: 1 }),
};

const anticaptchaJobs = {
  recaptcha: () => ac.solveRecaptchaV2Proxyless(site, '6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-'),
  turnstile: () => ac.solveTurnstileProxyless(site, '0x4AAAAAAABkMYinukE8nzY'),
  geetest: () => ac.solveGeeTestProxyless(site, '022397c99c9f646f6477822485f30404', 'a66f31a53a6e1d0f7aa0d4b41bd57ac1', '', null),
  geetest_v4: () => ac.solveGeeTestV4Proxyless(site, 'e392e1d7fd421dc63325744d5a2b9c73', '', {}),
  image: () => ac.solveImage(png),
};

function errorText(err) {
  if (typeof err === 'string') return err;
  if (err && err.errorType) return err.errorType; // CapMonster's GetBalanceError and the like
  return String(err && err.message || err);
}

async function run(kind) {
  const [sdk, job] = kind.split(':');
  try {
    if (sdk === 'capmonster') {
      if (job === 'balance') {
        const b = await capmonster.getBalance();
        return { sdk, kind: job, solution: b };
      }
      const res = await capmonster.Solve(capmonsterJobs[job](), quick);
      if (res.error) return { sdk, kind: job, error: res.error };
      return { sdk, kind: job, solution: res.solution };
    }
    if (job === 'balance') {
      return { sdk, kind: job, solution: { balance: await ac.getBalance() } };
    }
    const solution = await anticaptchaJobs[job]();
    return { sdk, kind: job, taskId: ac.session.taskId, solution };
  } catch (err) {
    return { sdk, kind: job, error: errorText(err) };
  }
}

async function main() {
  let kinds = process.argv.slice(2);
  if (!kinds.length) {
    kinds = Object.keys(capmonsterJobs).map((k) => 'capmonster:' + k);
    kinds.push(...Object.keys(anticaptchaJobs).map((k) => 'anticaptcha:' + k));
  }
  // CapMonster's client is an instance: its solves run at once. Anti-Captcha's
  // is one module-wide object keeping the last taskId: one solve at a time.
  const cmResults = Promise.all(kinds.filter((k) => k.startsWith('capmonster:')).map(run));
  const acResults = [];
  for (const k of kinds.filter((k) => k.startsWith('anticaptcha:'))) acResults.push(await run(k));
  for (const r of [...await cmResults, ...acResults]) console.log(JSON.stringify(r));
}

main();
