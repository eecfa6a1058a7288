//! `eve store check` on a PostgreSQL store: `amcheck` where the database has it, then eve's
//! consistency checks (`store/check.rs`) through the store's own reads.
//!
//! PostgreSQL checks its pages as it reads them (with data checksums on, a damaged page is an
//! error, `data_corrupted`), and its `amcheck` extension verifies B-tree indexes
//! (`bt_index_check`) and, from PostgreSQL 14, table pages (`verify_heapam`). eve does not
//! install the extension (that takes a superuser): when it is missing the report says so and
//! only eve's consistency checks run.

use super::PgStore;
use crate::store::StoreResult;
use crate::store::check::{CheckItem, Problems, StoreCheck, consistency};

impl PgStore {
    /// Checks this store in full (see the module's header): the report says what ran, what was
    /// skipped and why, and every problem found.
    pub async fn check(&self) -> StoreCheck {
        let mut report = StoreCheck::new(self.inner.shown.clone(), "postgres");
        report.checks.push(match self.amcheck().await {
            Ok(item) => item,
            Err(e) => {
                let mut problems = Problems::default();
                problems.push(format!("amcheck could not run: {e}"));
                CheckItem::ran("amcheck", "PostgreSQL's amcheck", problems)
            }
        });
        consistency(self, &mut report).await;
        report
    }

    async fn amcheck(&self) -> StoreResult<CheckItem> {
        let client = self.client().await?;
        // The extension's functions live in the schema it was created in, which the store's
        // `search_path` (its own schema) may not include: they are called by that name.
        let installed: Option<String> = client
            .query_opt(
                "SELECT n.nspname FROM pg_extension e \
                 JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'amcheck'",
                &[],
            )
            .await?
            .map(|r| r.get(0));
        let Some(schema) = installed else {
            return Ok(CheckItem::skipped(
                "amcheck",
                "the amcheck extension is not installed in this database (a superuser can add \
                 it: CREATE EXTENSION amcheck); only eve's consistency checks ran",
            ));
        };
        let home = format!("\"{}\"", schema.replace('"', "\"\""));
        let indexes: Vec<String> = client
            .query(
                "SELECT c.oid::regclass::text FROM pg_index i \
                 JOIN pg_class c ON c.oid = i.indexrelid \
                 JOIN pg_am a ON a.oid = c.relam \
                 JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE a.amname = 'btree' AND n.nspname = current_schema() ORDER BY 1",
                &[],
            )
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect();
        let mut problems = Problems::default();
        for index in &indexes {
            if let Err(e) = client
                .execute(
                    &format!("SELECT {home}.bt_index_check($1::text::regclass)"),
                    &[index],
                )
                .await
            {
                problems.push(format!(
                    "index {index}: {}",
                    crate::store::StoreError::from(e)
                ));
            }
        }
        let heap = client
            .query_opt(
                "SELECT 1 FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace \
                 WHERE p.proname = 'verify_heapam' AND n.nspname = $1",
                &[&schema],
            )
            .await?
            .is_some();
        let mut tables = 0usize;
        if heap {
            let names: Vec<String> = client
                .query(
                    "SELECT c.oid::regclass::text FROM pg_class c \
                     JOIN pg_namespace n ON n.oid = c.relnamespace \
                     WHERE c.relkind = 'r' AND n.nspname = current_schema() ORDER BY 1",
                    &[],
                )
                .await?
                .iter()
                .map(|r| r.get(0))
                .collect();
            tables = names.len();
            for table in &names {
                match client
                    .query(
                        &format!(
                            "SELECT blkno, offnum, msg FROM {home}.verify_heapam($1::text::regclass)"
                        ),
                        &[table],
                    )
                    .await
                {
                    Ok(rows) => {
                        for row in rows {
                            let block: i64 = row.get(0);
                            let offset: Option<i32> = row.get(1);
                            let msg: String = row.get(2);
                            problems.push(format!(
                                "table {table}, block {block}, item {}: {msg}",
                                offset.map_or("-".to_owned(), |o| o.to_string())
                            ));
                        }
                    }
                    Err(e) => problems.push(format!(
                        "table {table}: {}",
                        crate::store::StoreError::from(e)
                    )),
                }
            }
        }
        let detail = if heap {
            format!(
                "amcheck: bt_index_check on {} indexes, verify_heapam on {tables} tables",
                indexes.len()
            )
        } else {
            format!(
                "amcheck: bt_index_check on {} indexes (verify_heapam needs PostgreSQL 14)",
                indexes.len()
            )
        };
        Ok(CheckItem::ran("amcheck", detail, problems))
    }
}
