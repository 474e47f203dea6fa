use super::sending::{end_attempt, insert_report};
use super::*;
use crate::store::{test_server, PgStore, TrialStore};
use postgres::{Client, NoTls};

#[test]
fn writes_of_an_attempt_whose_lease_was_taken_back_are_refused() {
    let url = test_server::fresh_database();
    let mut store = PgStore::open(&url, "x").unwrap();
    store.put_meta(&crate::store::conformance::meta(1)).unwrap();
    store.sync().unwrap();
    let mut db = Client::connect(&url, NoTls).unwrap();
    let e: i64 = db
        .query_one("SELECT id FROM tune_experiments WHERE name = 'x'", &[])
        .unwrap()
        .get(0);
    db.execute(
        "INSERT INTO tune_attempts (experiment, trial, attempt, job, state, token, lease_until)
         VALUES ($1, 0, 1, '{}', 'running', 7, now() + interval '1 hour')",
        &[&e],
    )
    .unwrap();
    let place = crate::store::postgres_location(&url, "x");
    let mut db = Db::new(db, crate::store::pg_store::parse_url(&url, &place).unwrap());
    let metrics = std::collections::BTreeMap::from([("loss".to_string(), 0.5)]);
    let key = (e, 0, 1);
    assert!(insert_report(&mut db, 7, key, 1, &metrics)
        .unwrap()
        .is_some());
    // Another token (a stale holder) is refused even while the attempt runs.
    assert_eq!(insert_report(&mut db, 6, key, 2, &metrics).unwrap(), None);
    db.execute(
        "UPDATE tune_attempts SET state = 'lost' WHERE token = 7",
        &[],
    )
    .unwrap();
    assert_eq!(insert_report(&mut db, 7, key, 2, &metrics).unwrap(), None);
    assert!(!end_attempt(&mut db, 7, e, &Outcome::Returned).unwrap());
    let state: String = db
        .query_one("SELECT state FROM tune_attempts WHERE token = 7", &[])
        .unwrap()
        .get(0);
    assert_eq!(state, "lost");
    let reports: i64 = db
        .query_one("SELECT count(*) FROM tune_reports", &[])
        .unwrap()
        .get(0);
    assert_eq!(reports, 1);
}
