//! The entry points the coverage-guided fuzz targets (`fuzz/`) and their corpus replay
//! (`tests/fuzz_corpus.rs`) feed bytes to: Weir's own readers of untrusted input. Not an API.

use std::sync::OnceLock;

/// The config file: any text parses to settings or to an error naming file, line and key.
pub fn config(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = crate::config::parse_str(text, "fuzz.toml");
    }
}

/// The JSON answers Weir reads from upstreams: a token answer (its lifetimes, its aged copy,
/// the API host it announces), gh's GraphQL announcement, a create's answer (job, session, PR,
/// refusal), the sessions list and the dashboard's task form. The first byte picks the
/// token answer's `Content-Encoding`, so the gzip and deflate readers are reached too.
pub fn json_answer(data: &[u8]) {
    let (coding, body) = match data.split_first() {
        Some((c, rest)) => (*c, rest),
        None => (0, data),
    };
    let mut headers = http::HeaderMap::new();
    match coding % 4 {
        1 => {
            headers.insert(
                http::header::CONTENT_ENCODING,
                "gzip".parse().expect("static"),
            );
        }
        2 => {
            headers.insert(
                http::header::CONTENT_ENCODING,
                "deflate".parse().expect("static"),
            );
        }
        _ => {}
    }
    crate::pipeline::read_answer_for_fuzz(&headers, body);
    crate::queue::read_answer_for_fuzz(201, body);
    let _ = crate::sessions::model::parse_list(body);
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) {
        let _ = crate::sessions::create::NewTask::from_json(&v);
        let _ = serde_json::from_value::<weir_store::ItemResult>(v);
    }
}

/// One queue row as the store reads it back: the input picks each column's SQLite type and
/// value (the file may have been written by an older Weir, or damaged), then the store
/// decodes it by id and in a listing. Every row is an item or a typed error.
pub fn queue_row(data: &[u8]) {
    thread_local! {
        static STORE: (std::path::PathBuf, weir_store::Store, rusqlite::Connection) = {
            let dir = scratch_dir();
            let path = dir.join("queue.sqlite3");
            let store = weir_store::Store::open(&path).expect("a new queue");
            let raw = rusqlite::Connection::open(&path).expect("the same file");
            (dir, store, raw)
        };
    }
    const COLUMNS: [&str; 21] = [
        "upstream",
        "method",
        "path_and_query",
        "headers",
        "body",
        "identity",
        "credential_ref",
        "dedupe_key",
        "repo",
        "problem_statement",
        "state",
        "created_at",
        "attempts",
        "next_attempt_at",
        "last_attempt_at",
        "last_error",
        "result",
        "updated_at",
        "needs_lookup",
        "provisional_job_id",
        "provisional_session_id",
    ];
    // Fields are separated by 0xFF; a field's first byte picks its type.
    let mut fields = data.split(|b| *b == 0xFF);
    let values: Vec<rusqlite::types::Value> = COLUMNS
        .iter()
        .map(|_| {
            use rusqlite::types::Value;
            let f = fields.next().unwrap_or_default();
            let (tag, rest) = f.split_first().map_or((0, f), |(t, r)| (*t, r));
            match tag % 5 {
                0 => Value::Text(String::from_utf8_lossy(rest).into_owned()),
                1 => Value::Integer(
                    rest.iter()
                        .take(8)
                        .fold(0i64, |n, b| n.wrapping_shl(8) | i64::from(*b)),
                ),
                2 => Value::Blob(rest.to_vec()),
                3 => Value::Null,
                _ => Value::Real(rest.len() as f64 / 3.0),
            }
        })
        .collect();
    STORE.with(|(_, store, raw)| {
        let sql = format!(
            "INSERT INTO queue_items ({}) VALUES ({})",
            COLUMNS.join(", "),
            vec!["?"; COLUMNS.len()].join(", ")
        );
        let Ok(()) = raw
            .execute(&sql, rusqlite::params_from_iter(values.iter()))
            .map(drop)
        else {
            return;
        };
        let id = raw.last_insert_rowid();
        let _ = store.get(id);
        let _ = store.list(&weir_store::ListFilter::default());
        let _ = raw.execute("DELETE FROM queue_items", []);
    });
}

/// One client connection's bytes, as the laptop listener reads them: hyper's HTTP/1 (or
/// HTTP/2) server with Weir's settings, the front door, the router, the pipeline and the
/// control API, over an in-memory stream. The engine (started once) has one managed upstream
/// on a closed loopback port and a dead upstream proxy, so nothing leaves the machine; its
/// breaker opens after a few inputs, so later ones fail fast. Returns what Weir wrote back.
pub fn http1(data: &[u8]) -> Vec<u8> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    static ENGINE: OnceLock<(
        tokio::runtime::Runtime,
        crate::EngineHandle,
        std::path::PathBuf,
    )> = OnceLock::new();
    let (rt, handle, _) = ENGINE.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime");
        let dir = scratch_dir();
        let toml = "listen = \"127.0.0.1:0\"\nwatch_github_status = false\n\
            default_upstreams = false\n\
            allow_private_targets = true\nupstream_proxy = \"http://127.0.0.1:9\"\n\
            [offline]\ndetect = false\n[queue]\ncredentials = \"memory\"\n\
            [retry]\nbase = \"1ms\"\ncap = \"2ms\"\njitter = false\n\
            [breaker]\nminimum_calls = 2\nopen_wait = \"1h\"\njitter = false\n\
            [limits]\nheader_read_timeout = \"1s\"\n\
            [[upstream]]\nname = \"copilot\"\norigin = \"http://127.0.0.1:9\"\n";
        let settings = crate::config::parse_str(toml, "fuzz.toml").expect("the fuzz config");
        let opts = crate::EngineOptions::new(settings, dir.join("data"));
        let handle = rt.block_on(crate::start(opts)).expect("an engine");
        (rt, handle, dir)
    });
    rt.block_on(async {
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        let conn = tokio::spawn(crate::engine::serve_io(handle, server));
        let talk = async {
            let _ = client.write_all(data).await;
            let _ = client.shutdown().await;
            let mut out = Vec::new();
            let _ = client.read_to_end(&mut out).await;
            out
        };
        let out = tokio::time::timeout(std::time::Duration::from_secs(3), talk)
            .await
            .unwrap_or_default();
        conn.abort();
        out
    })
}

/// A fresh private directory under the OS's temp dir for this process's store or engine (left
/// behind: a fuzz run's scratch, a few KB).
fn scratch_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "weir-fuzz-{}-{}",
        std::process::id(),
        hex::encode(rand::random::<[u8; 6]>())
    ));
    std::fs::create_dir_all(&dir).expect("a scratch dir");
    dir
}
