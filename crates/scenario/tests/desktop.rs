//! The desktop subject (issue 22) as a scenario: scenarios/desktop.toml
//! parses into its four rights, a configuration without rights, with a
//! scheduling instead, or with roles is refused naming the forms, and
//! malformed subjects are refused with the line, the problem and the fix.

use std::path::Path;
use tessera_scenario::{Rights, Scenario, Subject};

const SUBJECT: &str = "name = \"d\"\nduration = \"2s\"\n\n[subject]\nkind = \"desktop\"\n\
                       frames = 64\nrate = 48000\nclients = 8\nload = 0.05\n\n";

fn pipewire_installed() -> bool {
    ["pipewire", "pw-metadata", "pw-jack", "dbus-daemon"]
        .iter()
        .all(|p| tessera_sys::process::installed(p))
}

/// The subject with `configurations` after it, refused: (line, reason).
fn refusal(subject: &str, configurations: &str) -> (usize, String) {
    let text = format!("{subject}{configurations}");
    let e = Scenario::parse(&text, "bad.toml").expect_err("should be refused");
    assert!(e.to_string().starts_with("bad.toml:"), "{e}");
    (e.line, e.reason)
}

#[test]
fn the_shipped_desktop_scenario_parses_into_its_rights() {
    if !pipewire_installed() {
        eprintln!("SKIPPED the desktop scenario: PipeWire is not installed (./scripts/setup.sh)");
        return;
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/desktop.toml");
    let s = match Scenario::from_file(&path) {
        Ok(s) => s,
        // rtkit-daemon is the one program a configuration needs beyond
        // PipeWire's: its refusal names the package.
        Err(e) if e.reason.contains("apt-get install rtkit") => {
            eprintln!("SKIPPED the desktop scenario: {e}");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let Subject::Desktop(d) = &s.subject else {
        panic!("not a desktop: {:?}", s.subject)
    };
    assert_eq!((d.frames, d.rate, d.clients, d.load), (64, 48_000, 8, 0.05));
    assert_eq!(d.period().as_nanos(), 1_333_333);
    let rights: Vec<Option<Rights>> = s.configurations.iter().map(|c| c.desktop).collect();
    assert_eq!(
        rights,
        [
            Some(Rights::None),
            Some(Rights::StockRtkit),
            Some(Rights::Tessera { guard: false }),
            Some(Rights::Tessera { guard: true }),
        ]
    );
    assert!(s.configurations.iter().all(|c| c.needs_privilege()));
    let spinner = &s.configurations[0].interference[1];
    assert_eq!(
        (spinner.0.as_str(), spinner.1.describe()),
        ("spinner", "fifo:95".into())
    );
    assert_eq!(s.baseline.as_deref(), Some("tessera's RTKit"));
}

#[test]
fn configurations_must_say_where_their_rights_come_from() {
    if !pipewire_installed() {
        eprintln!("SKIPPED desktop configurations: PipeWire is not installed");
        return;
    }
    let (line, reason) = refusal(SUBJECT, "[[configuration]]\nname = \"a\"\n");
    assert_eq!(line, 11);
    assert!(
        reason.contains("needs `subject`") && reason.contains("tessera+guard"),
        "{reason}"
    );
    let (line, reason) = refusal(
        SUBJECT,
        "[[configuration]]\nname = \"a\"\nsubject = \"fifo:88\"\n",
    );
    assert_eq!(line, 13);
    assert!(
        reason.contains("not a desktop's real-time rights"),
        "{reason}"
    );
    let (_, reason) = refusal(
        SUBJECT,
        "[[configuration]]\nname = \"a\"\nsubject = { synth = \"plain\" }\n",
    );
    assert!(reason.contains("no roles"), "{reason}");
    let s = Scenario::parse(
        &format!("{SUBJECT}[[configuration]]\nname = \"t\"\nsubject = \"tessera\"\n"),
        "ok.toml",
    )
    .unwrap();
    assert_eq!(
        s.configurations[0].desktop,
        Some(Rights::Tessera { guard: false })
    );
}

#[test]
fn malformed_desktop_subjects_name_the_problem_and_the_fix() {
    if !pipewire_installed() {
        eprintln!("SKIPPED desktop subjects: PipeWire is not installed");
        return;
    }
    let config = "[[configuration]]\nname = \"n\"\nsubject = \"none\"\n";
    let cases = [
        ("clients = 8\n", "", "missing key `clients`"),
        ("load = 0.05\n", "load = 0.2\n", "add up to 1.60"),
        ("load = 0.05\n", "load = 1.5\n", "in (0, 1)"),
        ("clients = 8\n", "clients = 0\n", "clients must be 1–32"),
        ("frames = 64\n", "frames = 100\n", "power of two"),
        ("rate = 48000\n", "rate = 1000\n", "8000–192000"),
        (
            "clients = 8\n",
            "clients = 8\nserver = \"jackd\"\n",
            "remove server",
        ),
        (
            "load = 0.05\n",
            "load = 0.05\n[[subject.client]]\nload = 0.1\n",
            "remove [[subject.client]]",
        ),
    ];
    for (from, to, expected) in cases {
        let (line, reason) = refusal(&SUBJECT.replacen(from, to, 1), config);
        assert!(line > 0, "{expected}: no line");
        assert!(reason.contains(expected), "{expected:?} not in {reason:?}");
    }
}
