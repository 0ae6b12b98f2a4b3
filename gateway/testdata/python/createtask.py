"""Solve reCAPTCHA v2 through captchaq's gateway in the JSON task dialect,
as Anti-Captcha's and CapMonster Cloud's docs write it.

The calls as their docs show them (anti-captcha.com/apidoc/methods/createTask
and getTaskResult: a POST of {"clientKey", "task"} to /createTask, then of
{"clientKey", "taskId"} to /getTaskResult until status is "ready"; errorId
above 0 with errorCode on an error; CapMonster Cloud's docs, the same calls
on api.capmonster.cloud), made with requests. The one change is the base URL
(and the key, a gateway key). Times are floats so a test can scale them down.

Usage:
    CAPTCHAQ_GATEWAY=http://127.0.0.1:8090 CAPTCHAAI_API_KEY=... python3 createtask.py
Prints "<taskId> <gRecaptchaResponse>" on success; on an API error prints
its errorCode and exits 2.
"""

import os
import sys
import time

import requests

BASE_URL = os.getenv("CAPTCHAQ_GATEWAY", "https://api.anti-captcha.com")
API_KEY = os.getenv("CAPTCHAAI_API_KEY", "")
POLL_INTERVAL = float(os.getenv("POLL_INTERVAL", "2"))
FIRST_WAIT = float(os.getenv("FIRST_WAIT", "5"))
MAX_TIMEOUT = float(os.getenv("MAX_TIMEOUT", "120"))


def call(method: str, payload: dict) -> dict:
    payload["clientKey"] = API_KEY
    resp = requests.post(BASE_URL + "/" + method, json=payload, timeout=30)
    resp.raise_for_status()
    data = resp.json()
    if data.get("errorId", 0) > 0:
        print(data.get("errorCode"))
        sys.exit(2)
    return data


def main() -> None:
    created = call("createTask", {
        "task": {
            "type": "RecaptchaV2TaskProxyless",
            "websiteURL": "https://shop.example/login",
            "websiteKey": "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-",
        },
        "softId": 0,
    })
    task_id = created["taskId"]
    time.sleep(FIRST_WAIT)
    deadline = time.time() + MAX_TIMEOUT
    while time.time() < deadline:
        result = call("getTaskResult", {"taskId": task_id})
        if result.get("status") == "ready":
            print(task_id, result["solution"]["gRecaptchaResponse"])
            return
        time.sleep(POLL_INTERVAL)
    print("TIMEOUT")
    sys.exit(3)


if __name__ == "__main__":
    main()
