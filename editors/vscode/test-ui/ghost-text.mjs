// Real VS Code UI check (code-server in headless Chromium): open scale.cu, go into the kernel body, wait for DICE
// ghost text, accept it with Tab, and check the line and the status bar. Exit code 1 on any failure.
// Usage: node ghost-text.mjs URL SCREENSHOT_DIR EXPECTED_LINE   (run.sh sets everything up)
import { chromium } from 'playwright-core';

const [url, shots, expectedLine] = process.argv.slice(2);
const browser = await chromium.launch({ executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium', headless: true,
  args: ['--no-sandbox'] });
const page = await browser.newPage({ viewport: { width: 1200, height: 700 } });
page.setDefaultTimeout(120_000);
let failed = false;
try {
  await page.goto(url);
  await page.waitForSelector('.monaco-workbench');
  await page.getByText('scale.cu', { exact: true }).first().click();
  await page.locator('.monaco-editor .view-lines').click();
  // The extension is active once its status item is there; then go to the body line of the kernel.
  await page.locator('.statusbar-item', { hasText: 'DICE' }).first().waitFor();
  await page.keyboard.press('Control+g');
  await page.keyboard.type('5');
  await page.locator('.quick-input-widget', { hasText: 'go to line 5' }).waitFor();
  await page.keyboard.press('Enter');
  await page.locator('.quick-input-widget').waitFor({ state: 'hidden' });
  await page.keyboard.press('End');
  const started = Date.now();
  await page.waitForSelector('.ghost-text-decoration, .ghost-text', { timeout: 600_000 });
  console.log(`ghost text shown after ${((Date.now() - started) / 1000).toFixed(1)} s`);
  await page.screenshot({ path: `${shots}/ghost-text.png` });
  await page.keyboard.press('Tab');
  await page.waitForTimeout(1000);
  // The buffer's text: each rendered line without ghost-text spans (the scripted model suggests the line again).
  const lines = await page.$$eval('.monaco-editor .view-line', (els) => els.map((e) => {
    const copy = e.cloneNode(true);
    copy.querySelectorAll('[class*="ghost-text"]').forEach((ghost) => ghost.remove());
    return copy.textContent.replace(/\u00a0/g, ' ');
  }));
  const status = await page.$$eval('.statusbar-item', (els) => els.map((e) => e.textContent).filter((t) => t.includes('DICE')));
  await page.screenshot({ path: `${shots}/accepted.png` });
  console.log('status bar:', status.join(' | '));
  if (!lines.includes(expectedLine)) {
    console.log(`FAIL: accepted text missing; editor lines: ${JSON.stringify(lines)}`);
    failed = true;
  }
  if (!status.some((text) => text.includes('✓'))) {
    console.log('FAIL: the status bar does not show the accepted verdict');
    failed = true;
  }
} catch (error) {
  console.log(`FAIL: ${error.message}`);
  await page.screenshot({ path: `${shots}/failure.png` });
  failed = true;
}
await browser.close();
console.log(`code-server ghost-text check: ${failed ? 'FAILED' : 'passed'}`);
process.exit(failed ? 1 : 0);
