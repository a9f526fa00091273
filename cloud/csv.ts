import { parse } from 'csv-parse/sync';

/** A CSV file read with its header: the column names in order, and one record per row. */
export interface CsvTable {
  readonly columns: readonly string[];
  readonly rows: readonly Record<string, string>[];
}

/**
 * Reads CSV text with a header row (RFC 4180: quoted fields may hold commas, quotes and line
 * breaks; a byte-order mark is dropped; blank lines are skipped). A row shorter than the header
 * has '' in the columns it lacks, so every record has every column.
 */
export function parseCsvTable(text: string): CsvTable {
  let columns: string[] = [];
  const records = parse(text, {
    bom: true,
    skip_empty_lines: true,
    relax_column_count: true,
    record_delimiter: ['\r\n', '\n'],
    columns: (header: string[]) => {
      columns = header;
      return header;
    },
  }) as Record<string, string | undefined>[];
  const rows = records.map((r) => {
    const row: Record<string, string> = {};
    for (const c of columns) row[c] = r[c] ?? '';
    return row;
  });
  return { columns, rows };
}

/** The records of CSV text with a header row (see {@link parseCsvTable}). */
export function parseCsv(text: string): Record<string, string>[] {
  return [...parseCsvTable(text).rows];
}
