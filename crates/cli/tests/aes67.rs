//! `tessera aes67 run` and `tessera net streams` refuse what they cannot do
//! with the problem and the fix, before they make anything: a bad route,
//! format or packet time, no streams at all, a network service that is not
//! there. Needs no privileges (nothing here touches the scheduler).

use std::process::{Command, Output, Stdio};

fn tessera(args: &[&str]) -> Output {
    let run_dir = std::env::temp_dir().join(format!("tessera-aes67-cli-{}", std::process::id()));
    Command::new(env!("CARGO_BIN_EXE_tessera"))
        .env("TESSERA_RUN_DIR", &run_dir)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run tessera")
}

/// Runs `args`, expects a failure, returns what it said.
fn refusal(args: &[&str]) -> String {
    let out = tessera(args);
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "tessera {args:?} succeeded: {said}");
    assert!(said.contains("fix:"), "no fix in: {said}");
    said
}

/// An L24 stereo stream of 1 ms packets, as a device announces it.
const SDP: &str = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=a device\r\nc=IN IP4 239.69.9.1/32\r\n\
                   t=0 0\r\nm=audio 5004 RTP/AVP 96\r\na=rtpmap:96 L24/48000/2\r\n\
                   a=ptime:1\r\n";

#[test]
fn bad_arguments_are_refused_with_the_fix() {
    let send = ["aes67", "run", "--send", "239.69.9.1:5004"];
    let with = |extra: &[&'static str]| [&send[..], extra].concat();
    let said = refusal(&with(&["--route", "loop"]));
    assert!(said.contains("route \"loop\""), "{said}");
    let said = refusal(&with(&["--encoding", "PCMU"]));
    assert!(said.contains("use L16 or L24"), "{said}");
    let said = refusal(&with(&[
        "--channels",
        "8",
        "--encoding",
        "L24",
        "--ptime",
        "4ms",
    ]));
    assert!(said.contains("1440"), "{said}");
    let said = refusal(&with(&["--playout", "soon"]));
    assert!(said.contains("--playout arrival"), "{said}");
    let said = refusal(&["aes67", "run"]);
    assert!(said.contains("no streams"), "{said}");
    // A stream of 1 ms packets from its session description (no service
    // needed): 16 packets do not hold 20 ms.
    let sdp = std::env::temp_dir().join(format!("tessera-cli-{}.sdp", std::process::id()));
    std::fs::write(&sdp, SDP).unwrap();
    let said = refusal(&[
        "aes67",
        "run",
        "--sdp",
        sdp.to_str().unwrap(),
        "--latency",
        "20ms",
        "--buffer",
        "16",
    ]);
    let _ = std::fs::remove_file(&sdp);
    assert!(said.contains("give --buffer 42"), "{said}");
}

#[test]
fn without_the_network_service_the_run_says_how_to_start_it() {
    let socket = std::env::temp_dir().join("tessera-aes67-no-such-service.sock");
    let socket = socket.to_str().unwrap();
    let said = refusal(&[
        "aes67",
        "run",
        "--socket",
        socket,
        "--no-cell",
        "--route",
        "tone",
        "--send",
        "127.0.0.1:5004",
    ]);
    assert!(said.contains("tessera serve net"), "{said}");
    let out = tessera(&["net", "streams", "--socket", socket]);
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("tessera serve net"), "{said}");
}
