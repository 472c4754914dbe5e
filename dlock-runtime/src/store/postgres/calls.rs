//! The SQL text of every call the store sends, built once per schema.

use super::schema::Schema;

/// The SQL text of every call, with the schema filled in. By default sent with their
/// parameters' types (`query_typed`): one round trip, no named prepared statement a pooler
/// would lose; with `postgres_prepared_statements`, prepared once per connection
/// (`PgLink::run`).
pub(super) struct Calls {
    pub(super) plain_acquire: String,
    pub(super) plain_release: String,
    pub(super) plain_undo_reentry: String,
    pub(super) sem_acquire: String,
    pub(super) sem_release: String,
    pub(super) sem_available: String,
    pub(super) rw_acquire: String,
    pub(super) rw_release: String,
    pub(super) fair_acquire: String,
    pub(super) fair_release: String,
    pub(super) fair_undo_reentry: String,
    pub(super) renew: String,
    pub(super) force_unlock: String,
    pub(super) pttl: String,
    pub(super) remember_name: String,
    #[cfg(test)]
    pub(super) micros: String,
}

impl Calls {
    pub(super) fn new(schema: &Schema) -> Calls {
        let s = schema.quoted();
        Calls {
            plain_acquire: format!(
                "SELECT held, detail FROM {s}.plain_acquire($1, $2, $3, $4, $5, $6, $7)"
            ),
            plain_release: format!(
                "SELECT remaining, listeners FROM {s}.plain_release($1, $2, $3, $4, $5, $6)"
            ),
            plain_undo_reentry: format!("SELECT {s}.plain_undo_reentry($1, $2, $3, $4)"),
            sem_acquire: format!("SELECT held, detail FROM {s}.sem_acquire($1, $2, $3, $4)"),
            sem_release: format!("SELECT {s}.sem_release($1, $2, $3, $4, $5)"),
            sem_available: format!("SELECT {s}.sem_available($1, $2)"),
            rw_acquire: format!(
                "SELECT held, detail FROM {s}.rw_acquire($1, $2, $3, $4, $5, $6, $7, $8, $9)"
            ),
            rw_release: format!("SELECT {s}.rw_release($1, $2, $3, $4, $5, $6, $7, $8)"),
            fair_acquire: format!(
                "SELECT held, detail FROM {s}.fair_acquire($1, $2, $3, $4, $5, $6, $7, $8, $9)"
            ),
            fair_release: format!("SELECT {s}.fair_release($1, $2, $3, $4, $5, $6, $7, $8)"),
            fair_undo_reentry: format!("SELECT {s}.fair_undo_reentry($1, $2, $3, $4, $5, $6)"),
            renew: format!("SELECT {s}.renew($1, $2, $3, $4)"),
            force_unlock: format!("SELECT {s}.force_unlock($1, $2)"),
            pttl: format!("SELECT {s}.pttl($1)"),
            remember_name: format!("SELECT {s}.remember_name($1, $2)"),
            #[cfg(test)]
            micros: format!("SELECT {s}.micros(clock_timestamp())"),
        }
    }
}
