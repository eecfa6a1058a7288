// The warehouse `spend.ts` queries (written for the fixture): answers every query with one row.
export function runQuery(sql: string) {
  return { rows: [[1]], sql };
}
