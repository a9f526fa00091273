import { describe, expect, it } from 'vitest';
import { parseCsv, parseCsvTable } from '../../cloud/csv.ts';
import { parseWorkload } from '../../cloud/sim/workload.ts';

describe('CSV reading', () => {
  it('keeps a quoted field that spans lines, with its commas and doubled quotes, as one field', () => {
    const text = 'job_id,note,gpus\r\n1,"first line\nsecond, with ""quotes""",8\n2,plain,1\n';
    expect(parseCsv(text)).toEqual([
      { job_id: '1', note: 'first line\nsecond, with "quotes"', gpus: '8' },
      { job_id: '2', note: 'plain', gpus: '1' },
    ]);
  });

  it('gives every record every column, drops a byte-order mark and skips blank lines', () => {
    const { columns, rows } = parseCsvTable('\uFEFFa,b,c\n1,2\n\n3,4,5\n');
    expect(columns).toEqual(['a', 'b', 'c']);
    expect(rows).toEqual([
      { a: '1', b: '2', c: '' },
      { a: '3', b: '4', c: '5' },
    ]);
  });

  it('a trace whose first row quotes a column name still finds its columns, and one missing is named', () => {
    const w = parseWorkload('t', '"job_id",submit_s,duration_s,gpus\nj1,0,60,1\n');
    expect(w.jobs.map((j) => j.id)).toEqual(['j1']);
    expect(() => parseWorkload('t', 'job_id,submit_s,gpus\nj1,0,1\n')).toThrow(/missing column "duration_s"/);
  });
});
