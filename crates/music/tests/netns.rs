//! The seed's two machines: the emulator in a network namespace of its own,
//! joined to the application's by a veth pair. The run creates both and
//! nothing of them is left when it ends. Root only: skipped (with
//! "SKIPPED") otherwise, a failure under CI=true.

mod common;

use tessera_music::lan::{spawn_slabs, Lan};
use tessera_music::{network_name, run};

/// The interfaces of the calling thread's namespace (/proc/net is the
/// process's, that is its main thread's).
fn interfaces() -> Vec<String> {
    std::fs::read_to_string("/proc/thread-self/net/dev")
        .unwrap()
        .lines()
        .filter_map(|line| Some(line.split_once(':')?.0.trim().to_string()))
        .collect()
}

/// The LAN's machine-side devices are named tl<pid>n<link>.
fn ours(names: &[String]) -> Vec<&String> {
    let prefix = format!("tl{}n", std::process::id());
    names
        .iter()
        .filter(|name| name.starts_with(&prefix))
        .collect()
}

#[test]
fn the_slabs_sits_alone_on_its_side_of_the_pair() {
    // The machine's lock also keeps this test's pair apart from the other
    // test's: both are named after the process.
    let Some(_machine) = tessera_testkit::privileged("the SLABS's network namespace") else {
        return;
    };
    let lan = Lan::create().unwrap();
    let inside = spawn_slabs(Some(&lan), interfaces)
        .unwrap()
        .join()
        .unwrap()
        .unwrap();
    // Each end on its own side (a new namespace may also hold the kernel's
    // fallback tunnels, tunl0 and the like, under the same names as here).
    let (app, slabs) = lan.devices();
    let (app, slabs) = (app.to_string(), slabs.to_string());
    assert!(inside.contains(&slabs), "{inside:?}");
    assert!(ours(&inside).is_empty(), "{inside:?}");
    assert!(inside.iter().any(|name| name == "lo"), "{inside:?}");
    assert_eq!(ours(&interfaces()), [&app]);
    assert!(!interfaces().contains(&slabs));
    drop(lan);
    assert!(ours(&interfaces()).is_empty(), "the pair is gone");
}

#[test]
fn emulator_and_application_across_the_lan() {
    let mut options = common::light_options(1.0, 0..2);
    let Some(_machine) = common::cell_when_root(&mut options, "music across a LAN") else {
        return;
    };
    options.lan = true;
    let outcome = run(&options).unwrap();
    let (app, emulator) = (&outcome.app, &outcome.emulator);
    let packages = emulator.packages_sent;
    assert!(packages > 0);
    let answered = common::assert_answered_or_counted(&outcome, &format!("{:?}", outcome.notes));
    assert_eq!(emulator.unexpected, 0);
    assert_eq!(emulator.response.count(), answered);
    assert_eq!(app.response.count(), answered);
    assert_eq!(
        outcome.results.configurations[0].name,
        network_name(true),
        "the report says where the SLABS was"
    );
    assert!(ours(&interfaces()).is_empty(), "the pair is gone");
}
