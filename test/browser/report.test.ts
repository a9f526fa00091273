import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { chromium, type Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { simulateCommand } from '../../cli/commands/simulate.ts';

/**
 * Opens the HTML report of a real simulation in headless Chromium (Debian's package, which
 * .ci/run installs) and checks that every chart rendered with data. Set CHROMIUM_PATH to use
 * another build. Without a browser the test is skipped with a notice, unless
 * GPU_FLEET_BROWSER_TESTS=required (as in CI), when a missing browser fails it.
 */
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const required = process.env.GPU_FLEET_BROWSER_TESTS === 'required';
const available = existsSync(CHROMIUM);
if (!available && !required)
  console.warn(`browser test skipped: no Chromium at ${CHROMIUM} (apt-get install chromium, or set CHROMIUM_PATH)`);
const sink = { write: () => true } as unknown as NodeJS.WritableStream;

describe.runIf(available || required)('HTML report in a browser', () => {
  let dir: string;
  let browser: Browser;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'gpu-fleet-report-'));
    await simulateCommand({ hours: 6, maxJobs: 200, out: dir, progress: false }, { stdout: sink, stderr: process.stderr });
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: [
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
    });
  }, 120_000);

  afterAll(async () => {
    await browser?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('renders every chart with data, offline, from disk', async () => {
    const page = await browser.newPage();
    const requests: string[] = [];
    page.on('request', (r) => {
      if (!r.url().startsWith('file:')) requests.push(r.url());
    });
    await page.goto(pathToFileURL(join(dir, 'report.html')).href);
    for (const chart of ['fleet', 'capacity-type', 'queue', 'cost', 'budget']) {
      const series = page.locator(`figure[data-chart="${chart}"] svg g.series`);
      expect(await series.count(), `chart ${chart} has series`).toBeGreaterThan(0);
      const points = await series.evaluateAll((gs) => gs.map((g) => Number(g.getAttribute('data-points'))));
      expect(Math.max(...points), `chart ${chart} has data points`).toBeGreaterThan(1);
      const box = await page.locator(`figure[data-chart="${chart}"] svg`).boundingBox();
      expect(box!.width).toBeGreaterThan(200);
      expect(box!.height).toBeGreaterThan(50);
    }
    // Lines and areas are drawn: paths with many segments, and bars with width.
    const longest = await page
      .locator('figure[data-chart="cost"] path')
      .evaluateAll((ps) => Math.max(...ps.map((p) => (p.getAttribute('d') ?? '').split('L').length)));
    expect(longest).toBeGreaterThan(10);
    expect(
      await page.locator('figure[data-chart="cost"] g.series').evaluateAll((gs) => gs.map((g) => g.getAttribute('data-series'))),
    ).toEqual(['gpu-fleet', 'on-demand', 'spot-greedy', 'cheapest-fit']);
    const barWidths = await page
      .locator('figure[data-chart="budget"] rect')
      .evaluateAll((rs) => rs.map((r) => Number(r.getAttribute('width'))));
    expect(barWidths.some((w) => w > 0)).toBe(true);
    await expect.poll(() => page.locator('table.compare tr').count()).toBe(5);
    // With services: each under each policy, ticks and requests in objective (a header and the four policies).
    expect(await page.locator('table.services-by-policy tr').count()).toBe(5);
    expect(requests).toEqual([]);
  });
});
