//! Failure classification on real files: full, read-only, corrupt, locked (by another
//! connection and by another process), and a schema from a newer build.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{new_item, temp_db};
use weir_store::{Store, StoreError, StoreOptions};

fn short_timeout() -> StoreOptions {
    StoreOptions {
        busy_timeout: Duration::from_millis(100),
        ..StoreOptions::default()
    }
}

#[test]
fn full_database_fails_typed_and_keeps_earlier_rows() {
    let (_dir, path) = temp_db();
    // The size cap is SQLite's own `max_page_count`: past it SQLite answers SQLITE_FULL
    // exactly as when the disk is full.
    let options = StoreOptions {
        max_size_bytes: Some(64 * 1024),
        ..StoreOptions::default()
    };
    let mut store = Store::open_with(&path, &options).unwrap();
    let mut item = new_item(0);
    item.body = vec![b'x'; 4 * 1024];
    let mut stored = Vec::new();
    let err = loop {
        let n = stored.len() as u32;
        item.dedupe_key = format!("key-{n}");
        match store.insert(&item, i64::from(n)) {
            Ok(i) => stored.push(i),
            Err(e) => break e,
        }
        assert!(stored.len() < 1_000, "the cap never hit");
    };
    assert!(matches!(err, StoreError::Full { .. }), "{err:?}");
    assert!(err.to_string().contains("queue.db"), "{err}");
    assert!(err.fix().contains("disk space"), "{}", err.fix());
    assert!(stored.len() >= 3, "only {} fitted", stored.len());

    // Everything committed before is intact, and reads still work on the same connection.
    for s in &stored {
        assert_eq!(store.get(s.id).unwrap().as_ref(), Some(s));
    }
    assert_eq!(store.counts().unwrap().queued, stored.len() as u64);
    drop(store);
    let reopened = Store::open(&path).unwrap();
    assert_eq!(reopened.counts().unwrap().queued, stored.len() as u64);
}

#[test]
fn read_only_database_refuses_writes_typed() {
    let (_dir, path) = temp_db();
    let id = Store::open(&path)
        .unwrap()
        .insert(&new_item(1), 0)
        .unwrap()
        .id;
    // This machine runs the tests as root, and chmod does not stop root from writing. Opening
    // with SQLITE_OPEN_READ_ONLY (StoreOptions::read_only) makes SQLite itself refuse every
    // write with SQLITE_READONLY — the same code it returns for a file or directory the user
    // may not write, or a read-only mount — so it stands in for those here.
    let options = StoreOptions {
        read_only: true,
        ..StoreOptions::default()
    };
    let mut store = Store::open_with(&path, &options).unwrap();
    assert_eq!(store.get(id).unwrap().unwrap().id, id, "reads work");
    for result in [
        store.insert(&new_item(2), 1).map(|_| ()),
        store.cancel(id, 1).map(|_| ()),
        store.recover_after_crash(1).map(|_| ()),
    ] {
        let err = result.unwrap_err();
        assert!(matches!(err, StoreError::ReadOnly { .. }), "{err:?}");
        assert!(err.fix().contains("writable"), "{}", err.fix());
    }
    assert_eq!(store.counts().unwrap().total(), 1);
}

#[test]
fn read_only_open_of_a_missing_file_cannot_open() {
    let (_dir, path) = temp_db();
    let options = StoreOptions {
        read_only: true,
        ..StoreOptions::default()
    };
    let err = Store::open_with(&path, &options).unwrap_err();
    assert!(matches!(err, StoreError::ReadOnly { .. }), "{err:?}");
    assert!(!path.exists(), "read-only open must not create the file");
}

#[test]
fn a_text_file_is_reported_corrupt_with_its_path() {
    let (dir, _) = temp_db();
    let path = dir.path().join("notes.txt");
    std::fs::write(&path, "these are my notes, not a database\n".repeat(200)).unwrap();
    let err = Store::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
    assert!(err.to_string().contains("notes.txt"), "{err}");
    assert!(err.fix().contains("notes.txt"), "{}", err.fix());
    assert_eq!(
        std::fs::read_to_string(&path).unwrap().len(),
        200 * 35,
        "the file is left as it was"
    );
}

#[test]
fn damaged_pages_are_reported_corrupt_at_open() {
    let (_dir, path) = temp_db();
    {
        let mut store = Store::open(&path).unwrap();
        for n in 0..50 {
            store.insert(&new_item(n), i64::from(n)).unwrap();
        }
    } // closed: the WAL is checkpointed into the main file
    let mut bytes = std::fs::read(&path).unwrap();
    let page = 4096;
    assert!(bytes.len() > 4 * page, "file too small: {}", bytes.len());
    // Keep the header page, scribble over the b-tree pages after it.
    for b in &mut bytes[page..4 * page] {
        *b = 0xA5;
    }
    std::fs::write(&path, &bytes).unwrap();
    let err = Store::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
}

#[test]
fn write_lock_held_by_another_connection_gives_locked_after_the_timeout() {
    let (_dir, path) = temp_db();
    let mut store = Store::open_with(&path, &short_timeout()).unwrap();
    let other = rusqlite::Connection::open(&path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();

    let err = store.insert(&new_item(1), 0).unwrap_err();
    assert!(matches!(err, StoreError::Locked { .. }), "{err:?}");
    assert!(err.is_transient());
    // Reads are not blocked by a writer in WAL mode.
    assert_eq!(store.counts().unwrap().total(), 0);

    other.execute_batch("ROLLBACK").unwrap();
    store.insert(&new_item(1), 0).unwrap();
}

/// Child half of `write_lock_held_by_another_process_gives_locked`: when started by it, takes
/// the write lock, says so on stdout, and holds it until stdin closes.
#[test]
#[ignore = "child process of write_lock_held_by_another_process_gives_locked"]
fn child_hold_write_lock() {
    let Ok(path) = std::env::var("WEIR_STORE_TEST_LOCK_PATH") else {
        eprintln!("only runs as the child of its parent test; nothing to do");
        return;
    };
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch("BEGIN IMMEDIATE").unwrap();
    println!("LOCK-HELD");
    std::io::stdout().flush().unwrap();
    let mut sink = String::new();
    while std::io::stdin().read_line(&mut sink).unwrap_or(0) > 0 {}
    conn.execute_batch("ROLLBACK").unwrap();
}

#[test]
fn write_lock_held_by_another_process_gives_locked() {
    let (_dir, path) = temp_db();
    let mut store = Store::open_with(&path, &short_timeout()).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_hold_write_lock",
            "--ignored",
            "--nocapture",
        ])
        .env("WEIR_STORE_TEST_LOCK_PATH", &path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let held = lines
        .by_ref()
        .map_while(Result::ok)
        .any(|l| l == "LOCK-HELD");
    assert!(held, "child never took the lock");

    let err = store.insert(&new_item(1), 0).unwrap_err();
    assert!(matches!(err, StoreError::Locked { .. }), "{err:?}");
    assert!(err.fix().contains("other Weir instance"), "{}", err.fix());

    drop(child.stdin.take()); // child releases the lock and exits
    assert!(child.wait().unwrap().success());
    store.insert(&new_item(1), 0).unwrap();
}

#[test]
fn a_newer_schema_is_refused_and_left_alone() {
    let (_dir, path) = temp_db();
    Store::open(&path).unwrap().insert(&new_item(1), 0).unwrap();
    rusqlite::Connection::open(&path)
        .unwrap()
        .pragma_update(None, "user_version", 99)
        .unwrap();
    let err = Store::open(&path).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::SchemaTooNew {
                found: 99,
                supported: weir_store::SCHEMA_VERSION,
                ..
            }
        ),
        "{err:?}"
    );
    let v: u32 = rusqlite::Connection::open(&path)
        .unwrap()
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(v, 99);
}

#[test]
fn a_directory_in_the_way_is_not_a_panic() {
    let (dir, _) = temp_db();
    let path = dir.path().join("is-a-dir");
    std::fs::create_dir(&path).unwrap();
    let err = Store::open(&path).unwrap_err();
    assert!(
        matches!(err, StoreError::ReadOnly { .. } | StoreError::Io { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("is-a-dir"), "{err}");
}
