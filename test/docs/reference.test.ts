import { describe, expect, it } from 'vitest';
import { drifted, PAGES } from '../../scripts/reference.ts';

describe('the generated reference pages', () => {
  it('are what the schemas and the CLI say now (npm run docs writes them)', () => {
    expect(Object.keys(PAGES)).toEqual(['docs/reference/config.md', 'docs/reference/job-spec.md', 'docs/reference/cli.md']);
    expect(drifted()).toEqual([]);
  });

  it('describe every field of the config and the spec', () => {
    for (const page of ['docs/reference/config.md', 'docs/reference/job-spec.md']) {
      const text = PAGES[page]!();
      const undescribed = text
        .split('\n')
        .filter((l) => l.startsWith('| `') && l.endsWith('|  |'))
        .map((l) => l.split(' | ')[0]!.slice(2));
      expect({ page, undescribed }).toEqual({ page, undescribed: [] });
    }
  });
});
