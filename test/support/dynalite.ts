// The DynamoDB-compatible server the tests use lives beside the benches' (bench/support), which use it too.
export { createTables, startDynalite, type LocalDynamo } from '../../bench/support/dynalite.ts';
