// Two users in headless Chromium, each on the demo page the gateway serves: alice writes to
// bob, bob sees the unread count and opens the conversation, alice sees it read; bob types
// and sends a photo, alice sees him typing and the photo; in a group with a third member,
// alice's receipt message goes from "2 unread" to "1 unread" once bob reads it.
//
// Run by the e2e test `browser` against a cluster it started:
// GATEWAY=http://… ALICE_TOKEN=… BOB_TOKEN=… ALICE=<id> BOB=<id> GROUP=<id> CHROMIUM=/usr/bin/chromium
import { chromium } from "playwright-core";

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};
const gateway = env("GATEWAY");
const [alice, bob, group] = [env("ALICE"), env("BOB"), env("GROUP")];
const direct = BigInt(alice) < BigInt(bob) ? `d:${alice}:${bob}` : `d:${bob}:${alice}`;
const PHOTO = Buffer.from(
  "iVBORw0KGgoAAAANSUhEUgAAAAQAAAADCAIAAAA7ljmRAAAAEElEQVR4nGM4IScHRww4OQD1xwwxB+utmQAAAABJRU5ErkJggg==",
  "base64",
);

const browser = await chromium.launch({
  executablePath: env("CHROMIUM"),
  args: [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
  ],
});
try {
  const page = async (token, who) => {
    const context = await browser.newContext();
    const p = await context.newPage();
    p.setDefaultTimeout(15_000);
    p.on("pageerror", (e) => console.error(`${who}: page error: ${e.message}`));
    await p.goto(`${gateway}/#token=${token}`);
    await p.locator("#me").filter({ hasText: `signed in as ${who}` }).waitFor();
    return p;
  };
  const a = await page(env("ALICE_TOKEN"), "alice");
  const b = await page(env("BOB_TOKEN"), "bob");
  const entry = (p, id) => p.locator(`#conversations li[data-conversation="${id}"]`);
  const lastMine = (p) => p.locator("#messages li.mine").last();

  // Alice starts a direct conversation with bob and writes.
  await a.fill("#peer", bob);
  await a.click("#new-chat button");
  await a.fill("#text", "hello bob");
  await a.click("#composer button");
  await lastMine(a).locator(".status", { hasText: /^unread$/ }).waitFor();

  // Bob sees one unread in the list, opens it, reads it; alice's message turns read.
  await entry(b, direct).locator(".unread", { hasText: /^1$/ }).waitFor();
  await entry(b, direct).click();
  await b.locator("#messages li.theirs .text", { hasText: "hello bob" }).waitFor();
  await entry(b, direct).locator(".unread:empty").waitFor({ state: "attached" });
  await lastMine(a).locator(".status", { hasText: /^read$/ }).waitFor();

  // Bob types (alice sees it) and sends a photo; alice sees the photo loaded.
  await b.locator("#text").pressSequentially("look");
  await a.locator("#typing", { hasText: "bob is typing" }).waitFor();
  await b.setInputFiles("#image", { name: "dot.png", mimeType: "image/png", buffer: PHOTO });
  await b.locator("#messages li.mine img").waitFor();
  const photo = a.locator("#messages li.theirs img").last();
  await photo.waitFor();
  await a.waitForFunction((img) => img.complete && img.naturalWidth === 4, await photo.elementHandle());

  // In the group (alice, bob, carol), alice's message counts who read it.
  const team = `g:${group}`;
  await entry(a, team).click();
  await a.fill("#text", "standup in 5");
  await a.click("#composer button");
  await lastMine(a).locator(".status", { hasText: /^2 unread$/ }).waitFor();
  await entry(b, team).locator(".unread", { hasText: /^[1-9]/ }).waitFor();
  await entry(b, team).click();
  await b.locator("#messages li.theirs .text", { hasText: "standup in 5" }).waitFor();
  await lastMine(a).locator(".status", { hasText: /^1 unread$/ }).waitFor();
  console.log("two browser users: messages, photo, typing and receipts all seen");
} catch (e) {
  for (const p of browser.contexts().flatMap((c) => c.pages())) {
    console.error(`page ${p.url().split("#")[0]}: status ${JSON.stringify(await p.textContent("#status"))}`);
    console.error(await p.innerHTML("#app"));
  }
  throw e;
} finally {
  await browser.close();
}
