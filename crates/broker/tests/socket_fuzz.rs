//! Fuzzed bytes on a daemon's control socket: 10 000 lines from a seeded
//! generator (random bytes, invalid UTF-8, NULs, overlong lines, valid
//! requests with mutated bytes, truncated JSON, wrong types, unknown
//! operations, other versions, absurd numbers, deep nesting) sent down one
//! connection. Each non-blank line gets exactly one reply, in order; every
//! refusal has a code, a message and a fix; the connection stays open; and
//! the broker's cells are the same afterwards.
//!
//! Its own test binary: it forces the broker's best-effort mode through the
//! environment, which is process-wide, so even as root it changes nothing
//! on the machine.

use serde_json::Value;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};
use tessera_broker::config::Config;
use tessera_broker::wire::MAX_LINE;
use tessera_broker::{ErrorCode, Response, Session};
use tessera_policy::CellRequest;
use tessera_testkit::{start_daemon, Rng, ScratchDir};

/// Fuzzed requests sent (blank lines besides), after the two fixed ones at
/// the edges of MAX_LINE.
const FUZZED: usize = 10_000;
/// The cell that must come through unchanged.
const KEPT: &str = "keep-me";
/// A cell that does not exist: the harmless requests' target.
const GHOST: &str = "ghost";
/// Every operation's name, to make up unknown ones.
const OPS: [&str; 17] = [
    "hello",
    "create-cell",
    "destroy-cell",
    "list-cells",
    "show-cell",
    "attach",
    "detach",
    "resize-cell",
    "resize-members",
    "status",
    "reset",
    "register-service",
    "unregister-service",
    "open-service",
    "list-services",
    "report",
    "monitor",
];
/// Stands for a raw JSON text in a serialized template.
const RAW: &str = "@raw@";

/// What a line is, and so what its reply must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A well-formed harmless request: answered ok.
    Valid,
    /// Whitespace only: no reply.
    Blank,
    RandomBytes,
    InvalidUtf8,
    Nul,
    Overlong,
    /// A harmless request with a few bytes changed: ok or refused.
    Mutated,
    Truncated,
    WrongType,
    UnknownOp,
    OtherVersion,
    AbsurdNumber,
    DeepNesting,
}

impl Kind {
    /// The code a refusal must carry, when the kind decides it.
    fn code(self) -> Option<ErrorCode> {
        match self {
            Kind::InvalidUtf8
            | Kind::Nul
            | Kind::Overlong
            | Kind::Truncated
            | Kind::WrongType
            | Kind::UnknownOp
            | Kind::DeepNesting => Some(ErrorCode::Malformed),
            Kind::OtherVersion => Some(ErrorCode::Version),
            _ => None,
        }
    }

    /// Whether the reply carries the request's id (its envelope is intact).
    fn echoes_id(self) -> bool {
        matches!(self, Kind::Valid | Kind::UnknownOp | Kind::OtherVersion)
    }
}

struct Case {
    kind: Kind,
    /// Without its newline.
    line: Vec<u8>,
    id: u64,
}

fn object(pairs: &[(&str, Value)]) -> Value {
    Value::Object(
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
    )
}

fn request(id: u64, op: &str, fields: &[(&str, Value)]) -> Value {
    let mut all = vec![("v", Value::from(1)), ("id", id.into()), ("op", op.into())];
    all.extend_from_slice(fields);
    object(&all)
}

fn budget(runtime_ns: u64, deadline_ns: u64, period_ns: u64) -> Value {
    object(&[
        ("runtime_ns", runtime_ns.into()),
        ("deadline_ns", deadline_ns.into()),
        ("period_ns", period_ns.into()),
    ])
}

/// Requests that change no cell whatever their bytes become under a few
/// mutations (their targets are far from KEPT's name).
fn harmless(id: u64) -> Vec<Value> {
    let pid = std::process::id();
    vec![
        request(id, "hello", &[]),
        request(id, "status", &[]),
        request(id, "list-cells", &[]),
        request(id, "show-cell", &[("name", KEPT.into())]),
        request(id, "list-services", &[]),
        request(id, "open-service", &[("name", GHOST.into())]),
        request(
            id,
            "monitor",
            &[("since_ms", 0.into()), ("fresh_within_ms", 60_000.into())],
        ),
        request(id, "destroy-cell", &[("name", GHOST.into())]),
        request(
            id,
            "attach",
            &[
                ("cell", GHOST.into()),
                ("pid", pid.into()),
                ("tid", pid.into()),
                ("cpuset_only", false.into()),
            ],
        ),
        request(id, "detach", &[("tid", i32::MAX.into())]),
        request(
            id,
            "resize-cell",
            &[
                ("name", GHOST.into()),
                ("budget", budget(1_000_000, 10_000_000, 10_000_000)),
                ("degrade", true.into()),
            ],
        ),
        request(
            id,
            "resize-members",
            &[
                ("name", GHOST.into()),
                (
                    "budgets",
                    serde_json::json!([{"tid": pid, "budget": budget(1_000_000, 10_000_000, 10_000_000)}]),
                ),
                ("degrade", true.into()),
            ],
        ),
        request(id, "unregister-service", &[("name", GHOST.into())]),
        request(
            id,
            "report",
            &[
                ("cell", GHOST.into()),
                ("misses", 1.into()),
                ("xruns", 1.into()),
            ],
        ),
    ]
}

fn create_intruder(id: u64, budget: Value) -> Value {
    let mut cell = serde_json::to_value(CellRequest::event_triggered("intruder", 1, 1)).unwrap();
    cell["budget"] = budget;
    request(
        id,
        "create-cell",
        &[("request", cell), ("bind", false.into())],
    )
}

fn resize_kept(id: u64, budget: Value) -> Value {
    request(
        id,
        "resize-cell",
        &[
            ("name", KEPT.into()),
            ("budget", budget),
            ("degrade", true.into()),
        ],
    )
}

fn attach_kept(id: u64, pid: i64) -> Value {
    request(id, "attach", &[("cell", KEPT.into()), ("pid", pid.into())])
}

/// Requests that would change the cells if they got through: only ever
/// sent broken in a way that must be refused.
fn dangerous(id: u64) -> Vec<Value> {
    vec![
        create_intruder(id, budget(1_000_000, 10_000_000, 10_000_000)),
        request(id, "reset", &[]),
        request(id, "destroy-cell", &[("name", KEPT.into())]),
        resize_kept(id, budget(2_000_000, 10_000_000, 10_000_000)),
        attach_kept(id, std::process::id().into()),
    ]
}

fn any_template(rng: &mut Rng, id: u64) -> Value {
    let mut all = harmless(id);
    all.extend(dangerous(id));
    rng.pick(&all).clone()
}

fn bytes(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap()
}

/// `template` with `key`'s value replaced by the JSON text `raw` (which a
/// Value may not be able to hold, like 1e400).
fn with_raw(template: &Value, key: &str, raw: &str) -> Vec<u8> {
    let mut v = template.clone();
    v[key] = RAW.into();
    serde_json::to_string(&v)
        .unwrap()
        .replace(&format!("\"{RAW}\""), raw)
        .into_bytes()
}

fn random_key(rng: &mut Rng, template: &Value) -> String {
    let keys: Vec<&String> = template.as_object().unwrap().keys().collect();
    rng.pick(&keys).to_string()
}

/// The line as the daemon will see it: one line, never blank.
fn one_line(mut line: Vec<u8>) -> Vec<u8> {
    for b in line.iter_mut().filter(|b| **b == b'\n') {
        *b = b' ';
    }
    if std::str::from_utf8(&line).is_ok_and(|s| s.trim().is_empty()) {
        line.push(b'#');
    }
    line
}

fn random_bytes(rng: &mut Rng) -> Vec<u8> {
    let len = 1 + rng.below(200);
    let json_ish = rng.below(2) == 0;
    let alphabet = b"{}[]\":,0123456789-.eE truefalsnul\\v1idop";
    (0..len)
        .map(|_| match json_ish {
            true => *rng.pick(alphabet),
            false => rng.byte(),
        })
        .collect()
}

fn insert(rng: &mut Rng, mut line: Vec<u8>, what: &[u8]) -> Vec<u8> {
    let at = rng.below(line.len() + 1);
    line.splice(at..at, what.iter().copied());
    line
}

fn invalid_utf8(rng: &mut Rng, id: u64) -> Vec<u8> {
    let sequences: [&[u8]; 8] = [
        b"\xff",
        b"\xfe\xfe",
        b"\x80",
        b"\xc3\x28",
        b"\xc0\x80",
        b"\xed\xa0\x80",
        b"\xf4\x90\x80\x80",
        b"\xe2\x82",
    ];
    let sequence = rng.pick(&sequences).to_vec();
    let line = bytes(&any_template(rng, id));
    insert(rng, line, &sequence)
}

fn with_nuls(rng: &mut Rng, id: u64) -> Vec<u8> {
    let mut line = bytes(&any_template(rng, id));
    for _ in 0..1 + rng.below(3) {
        line = insert(rng, line, b"\0");
    }
    line
}

fn overlong(rng: &mut Rng, id: u64) -> Vec<u8> {
    let pad = "x".repeat(MAX_LINE as usize + rng.below(150_000));
    bytes(&request(id, "status", &[("pad", pad.into())]))
}

fn mutated(rng: &mut Rng, id: u64) -> Vec<u8> {
    let mut line = bytes(rng.pick(&harmless(id)));
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(line.len());
        match rng.below(5) {
            0 => line[at] ^= 1 << rng.below(8),
            1 => line[at] = rng.byte(),
            2 => {
                line.remove(at);
            }
            3 => line.insert(at, rng.byte()),
            _ => {
                let end = (at + 1 + rng.below(8)).min(line.len());
                let span = line[at..end].to_vec();
                line.splice(at..at, span);
            }
        }
        if line.is_empty() {
            line.push(rng.byte());
        }
    }
    line
}

fn truncated(rng: &mut Rng, id: u64) -> Vec<u8> {
    let mut line = bytes(&any_template(rng, id));
    line.truncate(1 + rng.below(line.len() - 1));
    line
}

fn wrong_type(rng: &mut Rng, id: u64) -> Vec<u8> {
    let template = any_template(rng, id);
    let key = random_key(rng, &template);
    let raw = match &template[&key] {
        // Serde would take a small integer `op` for a variant's index.
        Value::String(_) if rng.below(2) == 0 => rng.below(OPS.len()).to_string(),
        Value::String(_) => rng
            .pick(&["-1", "1.5", "true", "null", "[]", "{}", "[\"x\"]"])
            .to_string(),
        // Never null for a number: an optional one takes it.
        Value::Number(_) => rng
            .pick(&["\"7\"", "1.5", "true", "[]", "{}", "[1]"])
            .to_string(),
        Value::Bool(_) => rng
            .pick(&["\"true\"", "1", "0", "null", "[]", "{}"])
            .to_string(),
        // An empty list is a list of anything.
        Value::Array(_) => rng
            .pick(&["\"x\"", "7", "true", "null", "{}", "[1]"])
            .to_string(),
        _ => rng
            .pick(&["\"x\"", "7", "true", "null", "[]", "[1]"])
            .to_string(),
    };
    with_raw(&template, &key, &raw)
}

fn unknown_op(rng: &mut Rng, id: u64) -> Vec<u8> {
    let near: Vec<String> = OPS
        .iter()
        .flat_map(|op| {
            [
                op.to_uppercase(),
                op.replace('-', "_"),
                format!("{op} "),
                format!("{op}\0"),
            ]
        })
        .collect();
    let op = match rng.below(2) {
        0 => rng.pick(&near).clone(),
        _ => (0..1 + rng.below(20))
            .map(|_| *rng.pick(b"abcdefghijklmnopqrstuvwxyz-") as char)
            .collect(),
    };
    if OPS.contains(&op.as_str()) {
        return unknown_op(rng, id);
    }
    let mut template = any_template(rng, id);
    template["op"] = op.into();
    bytes(&template)
}

fn other_version(rng: &mut Rng, id: u64) -> Vec<u8> {
    let v = match rng.below(3) {
        0 => *rng.pick(&[0, 2, 3, u32::MAX]),
        _ => 2 + rng.next_u64() as u32 % (u32::MAX - 2),
    };
    let mut template = any_template(rng, id);
    template["v"] = v.into();
    bytes(&template)
}

/// A number out of the range of the field's type.
fn out_of_range(rng: &mut Rng, key: &str) -> &'static str {
    let of_any: &[&str] = &[
        "18446744073709551616",
        "-9223372036854775809",
        "123456789012345678901234567890",
        "1e400",
        "-1e400",
        "1e-400",
        "0.5",
    ];
    let of_type: &[&str] = match key {
        "pid" | "tid" => &["2147483648", "-2147483649", "1099511627776"],
        "v" => &["4294967296", "-1"],
        _ => &["-1"],
    };
    let choices = match rng.below(2) {
        0 => of_any,
        _ => of_type,
    };
    choices[rng.below(choices.len())]
}

/// A number in range for its type but meaningless: budgets the kernel would
/// refuse, processes that cannot exist.
fn absurd_but_typed(rng: &mut Rng, id: u64) -> Vec<u8> {
    const MAX: u64 = u64::MAX;
    let budgets = [
        budget(0, 10_000_000, 10_000_000),
        budget(1, 10_000_000, 10_000_000),
        budget(20_000_000, 10_000_000, 10_000_000),
        budget(1_000_000, 20_000_000, 10_000_000),
        budget(0, 0, 0),
        budget(MAX, MAX, MAX),
        budget(1_000_000, 100_000_000_000, 100_000_000_000),
        budget(2_000, 50_000, 50_000),
    ];
    let pids = [0, -1, i32::MIN.into(), i32::MAX.into()];
    let request = match rng.below(3) {
        0 => create_intruder(id, rng.pick(&budgets).clone()),
        1 => resize_kept(id, rng.pick(&budgets).clone()),
        _ => attach_kept(id, *rng.pick(&pids)),
    };
    bytes(&request)
}

fn absurd_number(rng: &mut Rng, id: u64) -> Vec<u8> {
    if rng.below(3) == 0 {
        return absurd_but_typed(rng, id);
    }
    let template = any_template(rng, id);
    let numeric: Vec<&String> = template
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, v)| v.is_number())
        .map(|(k, _)| k)
        .collect();
    let key = rng.pick(&numeric).to_string();
    let raw = out_of_range(rng, &key);
    with_raw(&template, &key, raw)
}

fn deeply_nested(rng: &mut Rng, id: u64) -> Vec<u8> {
    let depth = 129 + rng.below(9_000);
    let raw = match rng.below(2) {
        0 => format!("{}{}", "[".repeat(depth), "]".repeat(depth)),
        _ => format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth)),
    };
    let template = any_template(rng, id);
    let key = match rng.below(2) {
        0 => random_key(rng, &template),
        _ => "extra".to_string(),
    };
    with_raw(&template, &key, &raw)
}

fn fuzzed(rng: &mut Rng, id: u64) -> Case {
    let kind = match rng.below(2_000) {
        0 => Kind::Overlong,
        1..=20 => Kind::Blank,
        _ => *rng.pick(&[
            Kind::RandomBytes,
            Kind::InvalidUtf8,
            Kind::Nul,
            Kind::Mutated,
            Kind::Mutated,
            Kind::Mutated,
            Kind::Truncated,
            Kind::WrongType,
            Kind::UnknownOp,
            Kind::OtherVersion,
            Kind::AbsurdNumber,
            Kind::DeepNesting,
        ]),
    };
    let line = match kind {
        Kind::Blank => rng.pick(&["", " ", "\t", " \r"]).as_bytes().to_vec(),
        Kind::RandomBytes => one_line(random_bytes(rng)),
        Kind::InvalidUtf8 => invalid_utf8(rng, id),
        Kind::Nul => with_nuls(rng, id),
        Kind::Overlong => overlong(rng, id),
        Kind::Mutated => one_line(mutated(rng, id)),
        Kind::Truncated => truncated(rng, id),
        Kind::WrongType => wrong_type(rng, id),
        Kind::UnknownOp => unknown_op(rng, id),
        Kind::OtherVersion => other_version(rng, id),
        Kind::AbsurdNumber => absurd_number(rng, id),
        Kind::DeepNesting => deeply_nested(rng, id),
        Kind::Valid => unreachable!("fixed cases only"),
    };
    Case { kind, line, id }
}

/// A status request padded to `len` bytes.
fn status_of_length(id: u64, len: usize) -> Vec<u8> {
    let bare = bytes(&request(id, "status", &[("pad", "".into())]));
    let pad = "x".repeat(len - bare.len());
    bytes(&request(id, "status", &[("pad", pad.into())]))
}

/// The lines at the edges of MAX_LINE (newline included), then the fuzzed.
fn cases() -> Vec<Case> {
    let limit = MAX_LINE as usize;
    let mut cases = vec![
        Case {
            kind: Kind::Valid,
            line: status_of_length(1, limit - 1),
            id: 1,
        },
        Case {
            kind: Kind::Overlong,
            line: status_of_length(2, limit),
            id: 2,
        },
    ];
    let mut rng = Rng(0x7e55_e7a5_0c4e_7f22);
    let mut requests = 0;
    for id in 10.. {
        if requests == FUZZED {
            break;
        }
        let case = fuzzed(&mut rng, id);
        requests += usize::from(case.kind != Kind::Blank);
        cases.push(case);
    }
    cases
}

/// Asks on the connection and returns the result (ids above the cases').
fn ask(writer: &mut UnixStream, replies: &mut impl BufRead, id: u64, op: &str) -> Value {
    writer
        .write_all(format!("{{\"v\":1,\"id\":{id},\"op\":\"{op}\"}}\n").as_bytes())
        .unwrap();
    let reply = read_reply(replies, &format!("the {op} request"));
    assert!(reply.ok && reply.id == id, "{op}: {reply:?}");
    reply.result.unwrap()
}

/// The cells as `list-cells` and `status` show them.
fn cells(writer: &mut UnixStream, replies: &mut impl BufRead, id: u64) -> (Value, Value) {
    let listed = ask(writer, replies, id, "list-cells");
    let status = ask(writer, replies, id + 1, "status");
    (listed, status["cells"].clone())
}

fn read_reply(replies: &mut impl BufRead, after: &str) -> Response {
    let mut text = String::new();
    let n = replies
        .read_line(&mut text)
        .unwrap_or_else(|e| panic!("no reply to {after}: {e}"));
    assert!(n > 0, "the daemon closed the connection after {after}");
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("reply to {after} is not a Response ({e}): {text}"))
}

fn check(case: &Case, reply: &Response, index: usize) {
    let shown = String::from_utf8_lossy(&case.line[..case.line.len().min(200)]);
    let what = format!("case {index} ({:?}) {shown:?}", case.kind);
    assert_eq!(reply.v, 1, "{what}: {reply:?}");
    if case.kind.echoes_id() {
        assert_eq!(reply.id, case.id, "{what}: {reply:?}");
    }
    if reply.ok {
        assert!(
            matches!(case.kind, Kind::Valid | Kind::Mutated),
            "{what} was accepted: {reply:?}"
        );
        assert!(
            reply.result.is_some() && reply.error.is_none(),
            "{what}: {reply:?}"
        );
        return;
    }
    assert_ne!(case.kind, Kind::Valid, "{what} was refused: {reply:?}");
    let error = reply
        .error
        .as_ref()
        .unwrap_or_else(|| panic!("{what}: {reply:?}"));
    assert!(
        !error.message.is_empty() && !error.fix.is_empty(),
        "{what}: a refusal without message or fix: {error:?}"
    );
    if let Some(code) = case.kind.code() {
        assert_eq!(error.code, code, "{what}: {error:?}");
    }
}

#[test]
fn every_fuzzed_line_gets_one_reply_and_no_cell_changes() {
    std::env::set_var("TESSERA_FORCE_BEST_EFFORT", "1");
    let scratch = ScratchDir::new("socket-fuzz");
    start_daemon(&scratch.paths, Config::default());
    Session::daemon_at(&scratch.paths)
        .unwrap()
        .create_cell(
            CellRequest::event_triggered(KEPT, 1_000_000, 10_000_000),
            false,
        )
        .unwrap();
    let stream = UnixStream::connect(scratch.paths.socket()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut replies = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    let before = cells(&mut writer, &mut replies, u64::MAX - 10);
    assert!(before.0.to_string().contains(KEPT), "{}", before.0);

    let cases = cases();
    let lines: Vec<Vec<u8>> = cases.iter().map(|c| c.line.clone()).collect();
    let bytes_sent: usize = lines.iter().map(|l| l.len() + 1).sum();
    let started = Instant::now();
    // Written from another thread: the daemon's replies must be read while
    // the lines go out, or both sides would block on full socket buffers.
    let sender = std::thread::spawn(move || {
        let mut out = BufWriter::new(writer);
        for line in &lines {
            out.write_all(line).unwrap();
            out.write_all(b"\n").unwrap();
        }
        out.into_inner().unwrap()
    });
    let mut answered = 0;
    for (index, case) in cases.iter().enumerate() {
        if case.kind == Kind::Blank {
            continue;
        }
        let reply = read_reply(&mut replies, &format!("case {index} ({:?})", case.kind));
        check(case, &reply, index);
        answered += 1;
    }
    let mut writer = sender.join().unwrap();
    let elapsed = started.elapsed();

    // Any reply beyond one per line would come before these, with another id.
    let after = cells(&mut writer, &mut replies, u64::MAX - 5);
    assert_eq!(before, after, "a fuzzed line changed the cells");
    eprintln!(
        "{} lines ({answered} answered, {} KiB) in {:.2} s",
        cases.len(),
        bytes_sent / 1024,
        elapsed.as_secs_f64()
    );
}
