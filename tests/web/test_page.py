#!/usr/bin/python3
"""The web page of `weft serve`, in a real browser: headless Chromium driven by Debian's
chromium-driver and python3-selenium. With a token set, the page asks for it; the test types it,
picks a prompt, sets a small size, submits, waits for the image to be shown in the gallery with
its parameters, then submits a long job, sees its progress move, cancels it and sees it cancelled;
the cluster view shows the runner. It saves a screenshot (argument 3, or the build folder).
Exit 77 (skipped) only when Chromium, its driver or selenium are not installed; a page that does
not work fails. usage: test_page.py WEFT_BINARY SOURCE_ROOT [SCREENSHOT.png]"""
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "api"))
import serve_util  # noqa: E402

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait
except ImportError:
    print("python3-selenium is not installed: skipped")
    sys.exit(77)

WEFT, ROOT = sys.argv[1], sys.argv[2]
SHOT = sys.argv[3] if len(sys.argv) > 3 else os.path.join(os.path.dirname(WEFT), "page.png")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
if not CHROMIUM or not os.path.exists(DRIVER):
    print("chromium or chromium-driver is not installed: skipped")
    sys.exit(77)


def browser():
    o = webdriver.ChromeOptions()
    o.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=1280,900", "--no-first-run", "--disable-extensions"):
        o.add_argument(a)
    return webdriver.Chrome(service=Service(DRIVER), options=o)


def main():
    srv = serve_util.Server(WEFT, token="page-token")
    drv = None
    try:
        drv = browser()
        drv.set_page_load_timeout(30)
        wait = WebDriverWait(drv, 60, poll_frequency=0.1)
        drv.get("http://%s/" % srv.addr)
        # the token, asked for once
        wait.until(lambda d: d.find_element(By.ID, "token-dialog").is_displayed())
        drv.find_element(By.ID, "token").send_keys("page-token")
        drv.find_element(By.CSS_SELECTOR, "#token-form button").click()
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#prompt option")) >= 3)
        assert drv.find_element(By.ID, "model").text == "flux-tiny"
        assert "no text encoder" in drv.find_element(By.ID, "prompt-note").text
        # a small job: the image appears in the gallery, with its parameters
        Select(drv.find_element(By.ID, "prompt")).select_by_value("lighthouse")
        for field, value in (("width", "128"), ("height", "128"), ("steps", "4"), ("seed", "11")):
            e = drv.find_element(By.ID, field)
            e.clear()
            e.send_keys(value)
        drv.find_element(By.ID, "submit").click()
        t0 = time.monotonic()

        def shown(d):
            for img in d.find_elements(By.CSS_SELECTOR, "#gallery figure img"):
                if d.execute_script("return arguments[0].complete && arguments[0].naturalWidth",
                                    img) == 128:
                    return img
            return False
        img = wait.until(shown)
        fig = img.find_element(By.XPATH, "..")
        caption = fig.find_element(By.TAG_NAME, "figcaption").text
        assert "lighthouse" in caption and "128x128" in caption and "seed 11" in caption, caption
        print("page: the image was shown %.2f s after the click" % (time.monotonic() - t0))
        # the job is what the API says
        status, _, data = srv.request("GET", "/v1/jobs?state=done")
        assert status == 200 and b'"seed":"11"' in data
        # a long job: progress moves, cancel stops it
        Select(drv.find_element(By.ID, "prompt")).select_by_value("red-fox")
        for field, value in (("width", "512"), ("height", "512"), ("steps", "100")):
            e = drv.find_element(By.ID, field)
            e.clear()
            e.send_keys(value)
        drv.find_element(By.ID, "submit").click()
        def long_card(d):  # this job's card (the last one's may still be there, done)
            for c in d.find_elements(By.CSS_SELECTOR, "#jobs .job"):
                if "red-fox 512x512" in c.find_element(By.CSS_SELECTOR, ".name").text:
                    return c
            return False
        card = wait.until(long_card)
        wait.until(lambda d: float(card.find_element(By.TAG_NAME, "progress")
                                   .get_attribute("value") or 0) > 0)
        assert "step" in card.find_element(By.CSS_SELECTOR, ".detail").text
        drv.save_screenshot(SHOT)
        card.find_element(By.CSS_SELECTOR, ".cancel").click()
        wait.until(lambda d: card.get_attribute("data-state") == "cancelled")
        status, _, data = srv.request("GET", "/v1/jobs?state=cancelled")
        assert status == 200 and b'"cancelled"' in data
        # the cluster view
        assert "runner local" in drv.find_element(By.ID, "cluster").text
        # no script error; the one 401 is the page finding out it needs the token
        errors = [e for e in drv.get_log("browser") if e.get("level") == "SEVERE" and
                  not (e.get("source") == "network" and "status of 401" in e.get("message", ""))]
        assert not errors, errors
        print("page: token, submit, image shown, progress, cancel, cluster: ok; screenshot %s"
              % SHOT)
        assert srv.stop() == 0
    finally:
        if drv:
            drv.quit()
        if srv.proc.poll() is None:
            print(srv.log_text()[-3000:])
        srv.cleanup()


if __name__ == "__main__":
    main()
