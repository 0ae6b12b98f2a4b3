"""Solve reCAPTCHA v2 through captchaq's gateway, as CaptchaAI's guides do it.

Written in the style of CaptchaAI-Examples,
articles/how-to-solve-recaptcha-v2-using-api/python/solve.py: submit with
requests to in.php (json=1), wait, poll res.php every POLL_INTERVAL seconds
(5, as the guide polls), read the token. The one change from the guide is
the base URL (and the key, a gateway key). Times are floats so a test can
scale them down.

Usage:
    CAPTCHAQ_GATEWAY=http://127.0.0.1:8090 CAPTCHAAI_API_KEY=... python3 solve.py
Prints "<id> <token>" on success; on a service error prints the code and
exits 2.
"""

import os
import sys
import time

import requests

BASE_URL = os.getenv("CAPTCHAQ_GATEWAY", "https://ocr.captchaai.com")
SUBMIT_URL = BASE_URL + "/in.php"
RESULT_URL = BASE_URL + "/res.php"

API_KEY = os.getenv("CAPTCHAAI_API_KEY", "")
CAPTCHA_METHOD = os.getenv("CAPTCHA_METHOD", "userrecaptcha")
CAPTCHA_SITEKEY = os.getenv("CAPTCHA_SITEKEY", "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-")
CAPTCHA_PAGEURL = os.getenv("CAPTCHA_PAGEURL", "https://shop.example/login")
POLL_INTERVAL = float(os.getenv("POLL_INTERVAL", "5"))
FIRST_WAIT = float(os.getenv("FIRST_WAIT", "15"))
MAX_TIMEOUT = float(os.getenv("MAX_TIMEOUT", "120"))

AUTH_ERRORS = {"ERROR_WRONG_USER_KEY", "ERROR_KEY_DOES_NOT_EXIST", "IP_BANNED"}
SOLVE_ERRORS = {"ERROR_CAPTCHA_UNSOLVABLE"}


def submit_task() -> str:
    """Submit the CAPTCHA task and return the task ID."""
    payload = {
        "key": API_KEY,
        "method": CAPTCHA_METHOD,
        "json": "1",
    }
    if CAPTCHA_METHOD == "userrecaptcha":
        payload["googlekey"] = CAPTCHA_SITEKEY
    else:
        payload["sitekey"] = CAPTCHA_SITEKEY
    payload["pageurl"] = CAPTCHA_PAGEURL
    resp = requests.get(SUBMIT_URL, params=payload, timeout=30)
    resp.raise_for_status()
    data = resp.json()
    if data.get("status") != 1:
        error = data.get("request", "UNKNOWN_ERROR")
        if error in AUTH_ERRORS:
            print(f"[!] Authentication error: {error}", file=sys.stderr)
        print(error)
        sys.exit(2)
    task_id = data["request"]
    print(f"[+] Task submitted. ID: {task_id}", file=sys.stderr)
    return task_id


def poll_result(task_id: str) -> str:
    """Poll for the CAPTCHA solution every POLL_INTERVAL seconds."""
    time.sleep(FIRST_WAIT)
    params = {"key": API_KEY, "action": "get", "id": task_id, "json": "1"}
    elapsed = FIRST_WAIT
    while elapsed < MAX_TIMEOUT:
        resp = requests.get(RESULT_URL, params=params, timeout=30)
        resp.raise_for_status()
        data = resp.json()
        if data.get("status") == 1:
            return data["request"]
        error = data.get("request", "")
        if error == "CAPCHA_NOT_READY":
            time.sleep(POLL_INTERVAL)
            elapsed += POLL_INTERVAL
            continue
        if error in SOLVE_ERRORS:
            print(f"[!] CAPTCHA unsolvable: {error}", file=sys.stderr)
        print(error)
        sys.exit(2)
    print("TIMEOUT")
    sys.exit(3)


def main() -> None:
    task_id = submit_task()
    token = poll_result(task_id)
    print(f"{task_id} {token}")


if __name__ == "__main__":
    main()
