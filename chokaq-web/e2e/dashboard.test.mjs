// Browser end-to-end test of the chokaq dashboard: Playwright (playwright-core) driving
// Debian's chromium, headless, against `cargo run -p chokaq-web --example e2e_server`
// (a fresh SQLite database; dashboards at /ops/jobs (basic auth) and /ro (read-only, bearer)).
//
//   cd chokaq-web/e2e && npm ci && node --test dashboard.test.mjs
//
// CHROMIUM overrides the browser (default /usr/bin/chromium); E2E_SERVER overrides the server
// command (default: cargo run -q -p chokaq-web --example e2e_server from the repository root).
// Screenshots: target/screenshots/overview.png, queue.png and job.png.

import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const SHOTS = path.join(ROOT, "target", "screenshots");
const BROWSER = process.env.CHROMIUM || "/usr/bin/chromium";
const BASIC = "Basic " + Buffer.from("ops:e2e-pass").toString("base64");
const BEARER = "Bearer ro-token";

/** The e2e server: a child process spoken to one line at a time. */
class Server {
  constructor() {
    const cmd = process.env.E2E_SERVER
      ? ["sh", ["-c", process.env.E2E_SERVER]]
      : ["cargo", ["run", "-q", "-p", "chokaq-web", "--example", "e2e_server"]];
    this.proc = spawn(cmd[0], cmd[1], { cwd: ROOT, stdio: ["pipe", "pipe", "inherit"] });
    this.waiters = [];
    this.lines = [];
    createInterface({ input: this.proc.stdout }).on("line", (line) => {
      const w = this.waiters.shift();
      if (w) w(line);
      else this.lines.push(line);
    });
    this.exited = new Promise((resolve) => this.proc.on("exit", resolve));
  }
  next(timeoutMs = 300_000) {
    if (this.lines.length) return Promise.resolve(this.lines.shift());
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error("e2e server did not answer in time")), timeoutMs);
      this.waiters.push((l) => {
        clearTimeout(t);
        resolve(l);
      });
    });
  }
  async send(command) {
    this.proc.stdin.write(command + "\n");
    const answer = await this.next(60_000);
    assert.ok(answer.startsWith("ok"), `${command} -> ${answer}`);
    return answer.slice(2).trim();
  }
  async close() {
    this.proc.stdin.end("quit\n");
    const timer = setTimeout(() => this.proc.kill("SIGKILL"), 10_000);
    await this.exited;
    clearTimeout(timer);
  }
}

/** Polls `fn` until it returns a truthy value or `ms` pass. */
async function until(what, fn, ms = 20_000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const count = async (page, sel) => Number((await page.locator(sel).first().innerText()).replace(/,/g, ""));

test("dashboard end to end", { timeout: 600_000 }, async (t) => {
  fs.mkdirSync(SHOTS, { recursive: true });
  const server = new Server();
  const first = await server.next();
  assert.match(first, /^URL http:\/\/127\.0\.0\.1:\d+$/);
  const url = first.slice(4);
  const base = `${url}/ops/jobs`;
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "chokaq-e2e-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: BROWSER,
    headless: true,
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      "--disable-quic",
      "--no-first-run",
    ],
    viewport: { width: 1280, height: 800 },
  });
  const page = context.pages()[0] || (await context.newPage());
  await page.setExtraHTTPHeaders({ Authorization: BASIC });
  // Anything the strict CSP blocked (an inline style or script) shows up here.
  const cspViolations = [];
  page.on("console", (m) => {
    if (/Content Security Policy/i.test(m.text())) cspViolations.push(m.text());
  });
  let deadId;
  try {
    await t.test("1. enqueue jobs", async () => {
      await server.send("enqueue emails e2e.ok.v1 300");
      await server.send("enqueue reports e2e.ok.v1 5");
      await server.send("enqueue e2e-fail e2e.fail.v1 1");
    });

    await t.test("2. the overview shows the counts", async () => {
      const resp = await page.goto(base);
      assert.equal(resp.status(), 200);
      // The overview is a shared snapshot at most about a second old (docs/operations.md):
      // the live refresh brings the new jobs in without a reload.
      await until("306 pending on the overview", async () => (await count(page, "#total-pending")) === 306);
      assert.equal(await count(page, "#total-pending"), 306);
      assert.equal(await count(page, "#total-dead"), 0);
      assert.equal(await count(page, 'tr[data-queue="emails"] [data-col="pending"]'), 300);
      assert.equal(await count(page, 'tr[data-queue="reports"] [data-col="pending"]'), 5);
    });

    await t.test("3. pausing a queue shows it paused", async () => {
      await page.click('tr[data-queue="reports"] a');
      await page.click('button[data-action="pause"]');
      await page.waitForURL(/\/queues\/reports\?done=pause$/);
      assert.match(await page.locator("#flash").innerText(), /Queue paused/);
      assert.equal(await page.locator("#setting-paused").innerText(), "yes");
      assert.equal(await page.locator('#queue-state [data-state="paused"]').count(), 1);
      await page.goto(base);
      assert.equal(await page.locator('tr[data-queue="reports"] [data-state="paused"]').count(), 1);
      assert.match(await page.locator("#problems").innerText(), /reports: paused/);
    });

    await t.test("3b. an empty paused queue is listed", async () => {
      await server.send("pause idle");
      await page.goto(base);
      const row = page.locator('tr[data-queue="idle"]');
      await until("the empty paused queue on the overview", async () => (await row.count()) === 1);
      assert.equal(await row.locator('[data-state="paused"]').count(), 1);
      assert.equal(await count(page, 'tr[data-queue="idle"] [data-col="pending"]'), 0);
      assert.match(await page.locator("#problems").innerText(), /idle: paused/);
    });

    await t.test("3c. a key cap set from the queue page", async () => {
      await page.goto(`${base}/queues/reports`);
      await page.fill('input[name="key_max_workers"]', "2");
      await page.click('button[data-action="key-cap"]');
      await page.waitForURL(/\/queues\/reports\?done=key-cap$/);
      assert.match(await page.locator("#flash").innerText(), /Key cap set/);
      assert.equal(await page.locator("#setting-key-cap").innerText(), "2");
    });

    await t.test("4. a worker runs and the counts move without a reload", async () => {
      await page.goto(base);
      await page.evaluate(() => {
        window.__noReload = "still here";
      });
      const seen = new Set();
      await server.send("work emails,reports,e2e-fail");
      await until(
        "300 archived and 1 dead on the live overview",
        async () => {
          const archived = await count(page, "#total-archived");
          seen.add(archived);
          return archived === 300 && (await count(page, "#total-dead")) === 1;
        },
        60_000,
      );
      const completed = await server.send("stop");
      assert.equal(Number(completed), 300);
      assert.equal(await page.evaluate(() => window.__noReload), "still here", "the page was reloaded");
      assert.ok(seen.size >= 2, `the archived count moved on the page: ${[...seen].join(", ")}`);
      // The paused queue kept its jobs.
      assert.equal(await count(page, 'tr[data-queue="reports"] [data-col="pending"]'), 5);
      assert.match(await page.locator("#problems").innerText(), /e2e-fail: 1 failed dead letter/);
      // The throughput chart: 300 done and 1 failed in the last hour, drawn as SVG bars.
      const chart = page.locator("#chart-total");
      await until("the chart's totals", async () => (await chart.getAttribute("data-done")) === "300");
      assert.equal(await chart.getAttribute("data-failed"), "1");
      assert.equal(await count(page, "#chart-total-done"), 300);
      assert.ok((await chart.locator("svg.tp rect.done").count()) >= 1, "done bars");
      assert.equal(await chart.locator("svg.tp rect.failed").count(), 1, "one failed bar");
      const bar = await chart.locator("svg.tp rect.done").first().boundingBox();
      assert.ok(bar && bar.height >= 1 && bar.width >= 1, `a visible bar: ${JSON.stringify(bar)}`);
      const fill = await chart.locator("svg.tp rect.done").first().evaluate((e) => getComputedStyle(e).fill);
      assert.notEqual(fill, "rgb(0, 0, 0)", "the bars take their colour from the stylesheet");
      assert.ok((await page.locator('tr[data-queue="emails"] svg.spark rect.done').count()) >= 1, "the queue's spark");
      await page.screenshot({ path: path.join(SHOTS, "overview.png"), fullPage: true });
      // The queue page has its own chart.
      await page.goto(`${base}/queues/emails`);
      assert.equal(await page.locator("#chart-queue").getAttribute("data-done"), "300");
      assert.equal(await page.locator("#chart-queue").getAttribute("data-failed"), "0");
      await page.screenshot({ path: path.join(SHOTS, "queue.png"), fullPage: true });
    });

    await t.test("5. a dead job opens and is retried", async () => {
      await page.goto(`${base}/dead`);
      await page.locator("#jobs tbody tr td.mono a").first().click();
      await page.waitForURL(/\/jobs\/[0-9a-f-]{36}$/);
      deadId = page.url().split("/").pop();
      assert.match(await page.locator("#job-state").innerText(), /dead: failed/);
      assert.match(await page.locator("#last-error").innerText(), /fails on purpose <b>not bold<\/b>/);
      const payload = JSON.parse(await page.locator("#payload").innerText());
      assert.equal(payload.note, "<script>alert('xss')</script>", "the payload is shown as text");
      assert.equal(await page.locator("script").count(), 1, "only the dashboard's own script");
      await page.screenshot({ path: path.join(SHOTS, "job.png"), fullPage: true });
      await page.click('button[data-action="retry"]');
      await page.waitForURL(/\?done=requeued$/);
      assert.match(await page.locator("#flash").innerText(), /Job retried/);
      assert.match(await page.locator("#job-state").innerText(), /pending/);
      assert.equal(await page.locator("#job-attempts").innerText(), "0 of 1");
      // Cancel asks first (a cancel is final); the accepted dialog sends it.
      let asked = "";
      page.once("dialog", (d) => {
        asked = d.message();
        d.accept();
      });
      await page.click('button[data-action="cancel"]');
      await page.waitForURL(/\?done=cancelled$/);
      assert.match(asked, /Cancel this job\?/);
      assert.match(await page.locator("#job-state").innerText(), /dead: cancelled/);
      // A cancel is counted apart and raises no dead-letter alarm.
      await page.goto(base);
      await until("1 cancelled on the overview", async () => (await count(page, "#total-cancelled")) === 1);
      assert.equal(await count(page, "#total-dead"), 0);
      assert.equal(await page.locator("a.card.bad #total-dead").count(), 0, "the dead-letter card is not red");
      assert.equal(await count(page, 'tr[data-queue="e2e-fail"] [data-col="cancelled"]'), 1);
      assert.doesNotMatch(await page.locator("#problems").innerText(), /dead letter/);
    });

    await t.test("6. a read-only dashboard has no action buttons", async () => {
      const ro = await context.newPage();
      await ro.setExtraHTTPHeaders({ Authorization: BEARER });
      for (const p of ["", "/queues/reports", "/queues/emails", `/jobs/${deadId}`, "/dead", "/jobs", "/workers"]) {
        const resp = await ro.goto(`${url}/ro${p}`);
        assert.equal(resp.status(), 200, p);
        assert.equal(await ro.locator("#read-only").count(), 1, p);
        assert.equal(await ro.locator('form[method="post"], button[data-action]').count(), 0, `actions on ${p || "/"}`);
      }
      // And a POST is refused even with a good CSRF token.
      const status = await ro.evaluate(async () => {
        const token = (await (await fetch("api/csrf")).json()).token;
        const r = await fetch("queues/reports/resume", { method: "POST", headers: { "x-csrf-token": token } });
        return r.status;
      });
      assert.equal(status, 403);
      await ro.close();
    });

    await t.test("7. nothing was blocked by the CSP", async () => {
      assert.deepEqual(cspViolations, []);
    });
  } finally {
    await context.close();
    fs.rmSync(profile, { recursive: true, force: true });
    await server.close();
  }
});
