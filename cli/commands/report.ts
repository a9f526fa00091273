import { mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { UsageError } from '../../core/errors.ts';
import { openFleet } from '../fleet.ts';
import type { Io } from './shared.ts';
import { buildReport, type FinOpsReport, type ReportFlags } from '../finops/report.ts';
import { reportCsv } from '../finops/csv.ts';
import { reportText } from '../finops/text.ts';
import { reportHtml } from '../finops/html.ts';

export async function reportCommand(flags: ReportFlags, io: Io): Promise<FinOpsReport> {
  if (flags.team !== undefined && !/^[a-z0-9-]{1,32}$/.test(flags.team))
    throw new UsageError(`--team "${flags.team}" is not a team id: lower-case letters, digits and "-", at most 32 characters`);
  const fleet = await openFleet(flags);
  let report: FinOpsReport;
  try {
    report = await buildReport(fleet, flags);
  } finally {
    await fleet.close();
  }
  if (flags.out) {
    const dir = resolve(flags.out);
    mkdirSync(dir, { recursive: true });
    // Its own names: a simulation's folder already holds the simulation's report.html.
    writeFileSync(join(dir, 'finops.html'), reportHtml(report));
    writeFileSync(join(dir, 'finops.csv'), reportCsv(report));
    writeFileSync(join(dir, 'finops.json'), `${JSON.stringify(report, null, 2)}\n`);
  }
  if (flags.json) io.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
  else if (flags.csv) io.stdout.write(reportCsv(report));
  else
    io.stdout.write(
      `${reportText(report)}\n${flags.out ? `\nwritten: ${join(resolve(flags.out), 'finops.html')}, finops.csv, finops.json\n` : ''}`,
    );
  return report;
}
