//! A connection that prepares each statement once: the client otherwise asks the server to
//! parse a statement before every execution, a second round trip on the hot path of every
//! report, claim and decision.

use std::collections::HashMap;

use postgres::types::ToSql;
use postgres::{Client, Row, Statement};

use crate::store::pg_store::PgSettings;

pub(crate) struct Db {
    client: Client,
    /// How to connect again.
    settings: PgSettings,
    statements: HashMap<&'static str, Statement>,
}

type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

impl Db {
    pub(crate) fn new(client: Client, settings: PgSettings) -> Db {
        Db {
            client,
            settings,
            statements: HashMap::new(),
        }
    }

    fn statement(&mut self, sql: &'static str) -> Result<Statement, postgres::Error> {
        if let Some(s) = self.statements.get(sql) {
            return Ok(s.clone());
        }
        let s = self.client.prepare(sql)?;
        self.statements.insert(sql, s.clone());
        Ok(s)
    }

    pub(crate) fn query(
        &mut self,
        sql: &'static str,
        params: Params,
    ) -> Result<Vec<Row>, postgres::Error> {
        let s = self.statement(sql)?;
        self.client.query(&s, params)
    }

    pub(crate) fn query_opt(
        &mut self,
        sql: &'static str,
        params: Params,
    ) -> Result<Option<Row>, postgres::Error> {
        let s = self.statement(sql)?;
        self.client.query_opt(&s, params)
    }

    pub(crate) fn query_one(
        &mut self,
        sql: &'static str,
        params: Params,
    ) -> Result<Row, postgres::Error> {
        let s = self.statement(sql)?;
        self.client.query_one(&s, params)
    }

    pub(crate) fn execute(
        &mut self,
        sql: &'static str,
        params: Params,
    ) -> Result<u64, postgres::Error> {
        let s = self.statement(sql)?;
        self.client.execute(&s, params)
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// The connection itself, for what needs a transaction (src/remote/checkpoints.rs).
    pub(crate) fn client(&mut self) -> &mut Client {
        &mut self.client
    }

    /// A new connection in place of a closed one (its statements prepared again as used).
    pub(crate) fn reconnect(&mut self) -> bool {
        match crate::store::pg_store::open(&self.settings) {
            Ok(c) => {
                self.client = c;
                self.statements.clear();
                true
            }
            Err(_) => false,
        }
    }
}
