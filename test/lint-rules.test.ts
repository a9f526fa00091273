import { fileURLToPath } from 'node:url';
import { ESLint } from 'eslint';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('..', import.meta.url));
const eslint = new ESLint({ cwd: root });

async function lint(code: string, filePath: string): Promise<string[]> {
  const [result] = await eslint.lintText(code, { filePath });
  return (result?.messages ?? []).map((m) => `${m.ruleId}: ${m.message}`);
}

describe('the core/ dependency rule', () => {
  it.each([
    ["import { EC2Client } from '@aws-sdk/client-ec2';", 'cloud SDKs belong in cloud/aws'],
    ["import { InstancesClient } from '@google-cloud/compute';", 'cloud SDKs belong in cloud/gcp'],
    ["import middy from '@middy/core';", 'Lambda middleware belongs in functions/'],
    ["import { Logger } from '@aws-lambda-powertools/logger';", 'Lambda middleware belongs in functions/'],
    ["import { Stack } from 'aws-cdk-lib';", 'infrastructure belongs in infra/'],
    ["import { readFileSync } from 'node:fs';", 'no Node I/O'],
    ["import { readFileSync } from 'fs';", 'no Node I/O'],
    ["import { spawn } from 'child_process';", 'no Node I/O'],
    ["import http from 'node:http';", 'no Node I/O'],
    ["import { SimCloud } from '../cloud/sim/sim-cloud.ts';", 'imports nothing from the other folders'],
    ["import { handler } from '../../functions/intake.ts';", 'imports nothing from the other folders'],
    ["import { x } from '../cli/main.ts';", 'imports nothing from the other folders'],
    ['export const t = Date.now();', 'core/ has no clock'],
    ['export const t = new Date();', 'core/ has no clock'],
    ['export const r = Math.random();', 'core/ is deterministic'],
    ['export const e = process.env.HOME;', 'reads no environment'],
  ])('rejects `%s` in core/', async (code, expected) => {
    const messages = await lint(code, 'core/example.ts');
    expect(messages.join('\n')).toContain(expected);
  });

  it('allows pure code and core-internal imports in core/', async () => {
    const code =
      "import { z } from 'zod';\nimport type { Job } from './job.ts';\nexport const when = (ms: number): Date => new Date(ms);\nexport const s = z.string();\nexport type J = Job;\n";
    expect(await lint(code, 'core/example.ts')).toEqual([]);
  });

  it('allows the same imports outside core/', async () => {
    const code = "import { readFileSync } from 'node:fs';\nexport const f = readFileSync;\nexport const t = Date.now();\n";
    expect(await lint(code, 'cloud/aws/example.ts')).toEqual([]);
  });
});

describe('the project conventions', () => {
  it.each([
    ['export class BadError extends Error {}', 'cloud/aws/example.ts', 'extends GpuFleetError'],
    ['export class BadError extends Error {}', 'core/example.ts', 'extends GpuFleetError'],
    ['export const m = (e: unknown) => (e instanceof Error ? e.message : String(e));', 'cli/example.ts', 'messageOf(error)'],
    ['export const m = (e: unknown) => (e instanceof Error ? e.message : String(e));', 'core/example.ts', 'messageOf(error)'],
  ])('rejects `%s` in %s', async (code, file, expected) => {
    expect((await lint(code, file)).join('\n')).toContain(expected);
  });

  it('allows an error class under the root, and messageOf', async () => {
    const code =
      "import { GpuFleetError, messageOf } from '../../core/errors.ts';\nexport class GoodError extends GpuFleetError {}\nexport const m = (e: unknown) => messageOf(e);\n";
    expect(await lint(code, 'cloud/aws/example.ts')).toEqual([]);
  });
});

describe('the reason codes', () => {
  it('declares only codes some decision gives (each appears in a source file besides its declaration)', async () => {
    const { readFileSync, readdirSync } = await import('node:fs');
    const { join } = await import('node:path');
    const declared = [...readFileSync(join(root, 'core/reason.ts'), 'utf8').matchAll(/^ {2}\| '([a-z-]+)'/gm)].map((m) => m[1]!);
    expect(declared.length).toBeGreaterThan(20);
    const sources = ['core', 'cloud', 'functions', 'agent', 'cli']
      .flatMap((d) => readdirSync(join(root, d), { recursive: true, encoding: 'utf8' }).map((f) => join(root, d, f)))
      .filter((f) => f.endsWith('.ts') && !f.endsWith(join('core', 'reason.ts')))
      .map((f) => readFileSync(f, 'utf8'))
      .join('\n');
    expect(declared.filter((code) => !sources.includes(`'${code}'`))).toEqual([]);
  });
});
