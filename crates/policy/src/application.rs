//! Applications as the unit of guarantee: how much a guarded application's
//! threads that are not real-time get (its *share*), and where all of its
//! reservations go — one core, several, or the shared cores under global
//! EDF — decided from what the threads want and what the machine has room
//! for, never by rule.
//!
//! Invariants (checked by the property tests):
//! - a thread's share is never below what it used unguarded, nor below its
//!   part of the application's floor ([`share_wanted`]);
//! - a layout never puts more on a core than the core has room for, nor
//!   more under global EDF than the shared cores hold ([`place`]);
//! - a layout never takes the last shared core, nor partitions cores when
//!   the cores left shared would be more than [`SHARED_HEADROOM_PCT`] %
//!   busy with what runs outside the reservations (the application's
//!   unreserved threads and the rest of the machine, as measured);
//! - when the reservations cannot all have what they want, the layout names
//!   every thread that would get less than it used unguarded, with what it
//!   wants and what would fit, instead of choosing silently.
//!
//! It must never measure, sleep or call the broker: the guard feeds it what
//! it measured and asks the broker for what it decided.

use crate::bandwidth::Bandwidth;
use serde::Serialize;

/// One thread to reserve, as measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Want {
    /// The thread's id (the kernel's TID).
    pub thread: i32,
    /// Made real-time by its program, or running the graph: the
    /// reservations an audio cycle passes through, kept together.
    pub graph: bool,
    /// The bandwidth its reservation asks for.
    pub wanted: Bandwidth,
    /// What it used unguarded (or, once reserved, over the last window).
    pub used: Bandwidth,
}

/// Room for the guard's reservations on one core: the core's free
/// bandwidth plus what the guard already holds there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CoreRoom {
    pub core: usize,
    pub room: Bandwidth,
}

/// What the machine offers a layout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Room {
    /// Every online core, in order, with its room.
    pub cores: Vec<CoreRoom>,
    /// Room under global EDF on the cores that would stay shared.
    pub global: Bandwidth,
    /// The core tried first for a one-core layout (the last: CPU 0 keeps
    /// the system's housekeeping).
    pub preferred: usize,
    /// What runs outside the guard's reservations — the application's
    /// threads that stay unreserved and the rest of the machine — as
    /// measured: the cores left shared must hold it with
    /// [`SHARED_HEADROOM_PCT`] to spare (a saturated core hides how much more
    /// its tasks would take).
    /// the cores left shared must still hold it.
    pub others_used: Bandwidth,
}

/// Where the reservations go.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Spread {
    /// All on one core: an audio cycle's threads mostly run one after
    /// another, and on one core a woken thread never waits for another
    /// CPU's interrupt.
    One { core: usize },
    /// Spread over several cores, the graph's threads together.
    Several { cores: Vec<usize> },
    /// In the shared cores under global EDF.
    Global,
}

/// A thread that would get less than it used unguarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Shortfall {
    pub thread: i32,
    pub used: Bandwidth,
    pub wanted: Bandwidth,
    /// What would fit for it, the others squeezed alike.
    pub fits: Bandwidth,
}

/// Why a layout was chosen, with the figures it was chosen from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "reason")]
pub enum Why {
    /// Everything fits on one core and the rest of the machine keeps enough.
    FitsOneCore { wanted: Bandwidth, room: Bandwidth },
    /// No one core holds it all; several do.
    NeedsSeveral {
        wanted: Bandwidth,
        largest_room: Bandwidth,
    },
    /// Partitioned cores would leave what runs outside the reservations
    /// (`others`) too little, or no partition holds it: global EDF holds
    /// it on the `shared` cores.
    Global {
        wanted: Bandwidth,
        largest_room: Bandwidth,
        others: Bandwidth,
        shared: Bandwidth,
    },
    /// Not even global EDF holds what is wanted: these threads are short.
    Short {
        wanted: Bandwidth,
        global: Bandwidth,
        short: Vec<Shortfall>,
    },
}

/// A layout: where each wanted thread goes (in the order given), and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Layout {
    pub spread: Spread,
    /// Each want's core, `None` under global EDF.
    pub cores: Vec<Option<usize>>,
    pub why: Why,
}

/// A non-real-time thread's share: what it used, with `headroom_pct` over,
/// never below its part of the application's `floor` (split among the
/// application's `threads` shared threads).
pub fn share_wanted(
    used: Bandwidth,
    floor: Bandwidth,
    threads: usize,
    headroom_pct: u32,
) -> Bandwidth {
    let grown = Bandwidth((used.0 as u128 * (100 + headroom_pct as u128) / 100) as u64);
    let part = Bandwidth(floor.0 / threads.max(1) as u64);
    grown.max(part).max(used)
}

/// Decides where the reservations go: one core when everything fits there
/// (the preferred core first, then the one with most room) and the cores
/// left shared still hold the unreserved threads; else several cores,
/// fewest first, the graph's threads together; else global EDF; else
/// global EDF with the threads that would be short named.
pub fn place(wants: &[Want], room: &Room) -> Layout {
    let wanted: Bandwidth = wants.iter().map(|w| w.wanted).sum();
    let largest_room = room.cores.iter().map(|c| c.room).max().unwrap_or_default();
    let cores = room.cores.len();
    if leaves_enough(cores, 1, room) {
        if let Some(core) = one_core(wanted, room) {
            return Layout {
                spread: Spread::One { core: core.core },
                cores: vec![Some(core.core); wants.len()],
                why: Why::FitsOneCore {
                    wanted,
                    room: core.room,
                },
            };
        }
    }
    for k in 2..cores {
        if !leaves_enough(cores, k, room) {
            break;
        }
        if let Some((used, assigned)) = several(wants, room, k) {
            return Layout {
                spread: Spread::Several { cores: used },
                cores: assigned,
                why: Why::NeedsSeveral {
                    wanted,
                    largest_room,
                },
            };
        }
    }
    let why = if wanted <= room.global {
        Why::Global {
            wanted,
            largest_room,
            others: room.others_used,
            shared: shared_after(cores, 0),
        }
    } else {
        Why::Short {
            wanted,
            global: room.global,
            short: shortfalls(wants, room.global),
        }
    };
    Layout {
        spread: Spread::Global,
        cores: vec![None; wants.len()],
        why,
    }
}

/// The most of the cores left shared that what runs outside the
/// reservations may use when a layout partitions cores: beyond it, taking
/// whole cores from the machine would squeeze everything else (on two
/// cores under load, one exclusive core leaves the other saturated, and the
/// application's own unreserved threads and the guard wait behind it).
pub const SHARED_HEADROOM_PCT: u64 = 75;

/// Whether partitioning `taken` of `cores` leaves the shared ones enough
/// for what runs outside the reservations: at least one core, used at
/// most [`SHARED_HEADROOM_PCT`] %.
fn leaves_enough(cores: usize, taken: usize, room: &Room) -> bool {
    let left = shared_after(cores, taken);
    let usable = Bandwidth((left.0 as u128 * SHARED_HEADROOM_PCT as u128 / 100) as u64);
    left > Bandwidth::ZERO && usable >= room.others_used
}

/// Whole cores left shared when `taken` are partitioned.
fn shared_after(cores: usize, taken: usize) -> Bandwidth {
    Bandwidth::ONE.times(cores.saturating_sub(taken) as u64)
}

/// The core that holds `wanted`: the preferred one, else the roomiest.
fn one_core(wanted: Bandwidth, room: &Room) -> Option<CoreRoom> {
    let fits = |c: &&CoreRoom| c.room >= wanted;
    room.cores
        .iter()
        .filter(fits)
        .find(|c| c.core == room.preferred)
        .or_else(|| {
            room.cores
                .iter()
                .filter(fits)
                .max_by_key(|c| (c.room, c.core))
        })
        .copied()
}

/// Packs the wants on `k` cores, roomiest first: the graph's threads
/// together on the first, the others first-fit by decreasing want. The
/// cores used and each want's core, if they fit.
fn several(wants: &[Want], room: &Room, k: usize) -> Option<(Vec<usize>, Vec<Option<usize>>)> {
    let mut bins: Vec<CoreRoom> = room.cores.clone();
    bins.sort_by_key(|c| std::cmp::Reverse((c.room, c.core)));
    bins.truncate(k);
    let mut left: Vec<Bandwidth> = bins.iter().map(|c| c.room).collect();
    let mut assigned = vec![None; wants.len()];
    let graph: Bandwidth = wants.iter().filter(|w| w.graph).map(|w| w.wanted).sum();
    if graph > left[0] {
        return None;
    }
    left[0] = left[0] - graph;
    for (i, _) in wants.iter().enumerate().filter(|(_, w)| w.graph) {
        assigned[i] = Some(0);
    }
    let mut others: Vec<usize> = (0..wants.len()).filter(|&i| !wants[i].graph).collect();
    others.sort_by_key(|&i| std::cmp::Reverse((wants[i].wanted, wants[i].thread)));
    for i in others {
        let bin = (0..k).find(|&b| left[b] >= wants[i].wanted)?;
        left[bin] = left[bin] - wants[i].wanted;
        assigned[i] = Some(bin);
    }
    let used: Vec<usize> = (0..k)
        .filter(|b| assigned.contains(&Some(*b)))
        .map(|b| bins[b].core)
        .collect();
    let cores = assigned.iter().map(|b| b.map(|b| bins[b].core)).collect();
    Some((used, cores))
}

/// What each thread would get if `room` were shared in proportion to what
/// each wants, and the threads that would then get less than they used.
fn shortfalls(wants: &[Want], room: Bandwidth) -> Vec<Shortfall> {
    let wanted: u128 = wants
        .iter()
        .map(|w| w.wanted.0 as u128)
        .sum::<u128>()
        .max(1);
    wants
        .iter()
        .map(|w| Shortfall {
            thread: w.thread,
            used: w.used,
            wanted: w.wanted,
            fits: Bandwidth((w.wanted.0 as u128 * room.0 as u128 / wanted) as u64),
        })
        .filter(|s| s.fits < s.used)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pct(p: f64) -> Bandwidth {
        Bandwidth::from_fraction(p / 100.0)
    }

    fn want(thread: i32, graph: bool, wanted: f64, used: f64) -> Want {
        Want {
            thread,
            graph,
            wanted: pct(wanted),
            used: pct(used),
        }
    }

    fn two_cores(room: f64) -> Room {
        Room {
            cores: vec![
                CoreRoom {
                    core: 0,
                    room: pct(room),
                },
                CoreRoom {
                    core: 1,
                    room: pct(room),
                },
            ],
            global: pct(room * 2.0),
            preferred: 1,
            others_used: pct(5.0),
        }
    }

    #[test]
    fn a_graph_and_its_network_threads_that_fit_share_the_preferred_core() {
        let wants = [
            want(1, true, 20.0, 15.0),
            want(2, false, 10.0, 8.0),
            want(3, false, 10.0, 8.0),
        ];
        let layout = place(&wants, &two_cores(88.0));
        assert_eq!(layout.spread, Spread::One { core: 1 });
        assert_eq!(layout.cores, vec![Some(1); 3]);
        assert!(matches!(layout.why, Why::FitsOneCore { .. }));
    }

    #[test]
    fn a_busy_machine_keeps_its_cores_shared() {
        // The graph fits one core, but the rest of the machine keeps more
        // than the one core a partition would leave it busy.
        let wants = [want(1, true, 40.0, 30.0)];
        let mut room = two_cores(88.0);
        room.others_used = pct(140.0);
        let layout = place(&wants, &room);
        assert_eq!(layout.spread, Spread::Global);
        assert!(
            matches!(layout.why, Why::Global { others, .. } if others == pct(140.0)),
            "{:?}",
            layout.why
        );
        // At the headroom's edge, the partition is still taken.
        room.others_used = pct(75.0);
        assert_eq!(place(&wants, &room).spread, Spread::One { core: 1 });
    }

    #[test]
    fn what_no_core_holds_goes_global_on_two_cores() {
        // Two cores: a second partitioned core would leave none shared.
        let wants = [want(1, true, 50.0, 40.0), want(2, false, 60.0, 50.0)];
        let layout = place(&wants, &two_cores(88.0));
        assert_eq!(layout.spread, Spread::Global);
        assert!(matches!(layout.why, Why::Global { .. }));
    }

    #[test]
    fn several_cores_keep_the_graph_together() {
        let mut room = two_cores(88.0);
        room.cores.push(CoreRoom {
            core: 2,
            room: pct(88.0),
        });
        room.cores.push(CoreRoom {
            core: 3,
            room: pct(60.0),
        });
        room.global = pct(300.0);
        let wants = [
            want(1, true, 40.0, 30.0),
            want(2, true, 30.0, 25.0),
            want(3, false, 70.0, 60.0),
        ];
        let layout = place(&wants, &room);
        let Spread::Several { cores } = &layout.spread else {
            panic!("{layout:?}");
        };
        assert_eq!(cores.len(), 2);
        assert_eq!(layout.cores[0], layout.cores[1]);
        assert_ne!(layout.cores[0], layout.cores[2]);
    }

    #[test]
    fn short_threads_are_named_with_what_would_fit() {
        let wants = [want(1, true, 100.0, 90.0), want(2, false, 100.0, 90.0)];
        let layout = place(&wants, &two_cores(60.0));
        let Why::Short { short, .. } = &layout.why else {
            panic!("{layout:?}");
        };
        assert_eq!(short.len(), 2);
        assert!(short
            .iter()
            .all(|s| s.fits < s.used && s.fits > Bandwidth::ZERO));
    }

    #[test]
    fn a_share_covers_use_headroom_and_the_floor() {
        let used = pct(10.0);
        assert_eq!(
            share_wanted(used, pct(2.0), 2, 20),
            Bandwidth(used.0 * 120 / 100)
        );
        assert_eq!(
            share_wanted(Bandwidth::ZERO, pct(4.0), 2, 20),
            Bandwidth(pct(4.0).0 / 2)
        );
    }

    fn arb_wants() -> impl Strategy<Value = Vec<Want>> {
        proptest::collection::vec((any::<bool>(), 1u64..600, 0u64..100), 1..12).prop_map(|v| {
            v.into_iter()
                .enumerate()
                .map(|(i, (graph, wanted, used_pct))| {
                    let wanted = Bandwidth(wanted * Bandwidth::ONE.0 / 1000);
                    Want {
                        thread: i as i32 + 100,
                        graph,
                        wanted,
                        used: Bandwidth(wanted.0 * used_pct / 100),
                    }
                })
                .collect()
        })
    }

    fn arb_room() -> impl Strategy<Value = Room> {
        (proptest::collection::vec(0u64..950, 1..6), 0u64..1000).prop_map(|(rooms, unreserved)| {
            let cores: Vec<CoreRoom> = rooms
                .iter()
                .enumerate()
                .map(|(core, r)| CoreRoom {
                    core,
                    room: Bandwidth(r * Bandwidth::ONE.0 / 1000),
                })
                .collect();
            let global = cores.iter().map(|c| c.room).sum();
            Room {
                preferred: cores.len() - 1,
                cores,
                global,
                others_used: Bandwidth(unreserved * Bandwidth::ONE.0 / 1000),
            }
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn a_layout_never_exceeds_what_a_core_or_global_edf_holds(wants in arb_wants(), room in arb_room()) {
            let layout = place(&wants, &room);
            prop_assert_eq!(layout.cores.len(), wants.len());
            for c in &room.cores {
                let on: Bandwidth = wants.iter().zip(&layout.cores)
                    .filter(|(_, at)| **at == Some(c.core)).map(|(w, _)| w.wanted).sum();
                prop_assert!(on <= c.room, "core {} holds {} of {}", c.core, on, c.room);
            }
            if let Why::Global { wanted, .. } = layout.why {
                prop_assert!(wanted <= room.global);
            }
        }

        #[test]
        fn a_layout_always_leaves_a_shared_core_that_holds_the_unreserved_threads(wants in arb_wants(), room in arb_room()) {
            let layout = place(&wants, &room);
            let taken = match &layout.spread {
                Spread::One { .. } => 1,
                Spread::Several { cores } => cores.len(),
                Spread::Global => 0,
            };
            if taken > 0 {
                prop_assert!(taken < room.cores.len());
                prop_assert!(leaves_enough(room.cores.len(), taken, &room));
                let left = shared_after(room.cores.len(), taken);
                prop_assert!(left.0 as u128 * SHARED_HEADROOM_PCT as u128 / 100 >= room.others_used.0 as u128);
            }
        }

        #[test]
        fn the_graph_is_never_split_over_cores(wants in arb_wants(), room in arb_room()) {
            let layout = place(&wants, &room);
            let graph: Vec<Option<usize>> = wants.iter().zip(&layout.cores)
                .filter(|(w, _)| w.graph).map(|(_, c)| *c).collect();
            prop_assert!(graph.windows(2).all(|p| p[0] == p[1]));
        }

        #[test]
        fn only_a_short_layout_gives_a_thread_less_than_it_used(wants in arb_wants(), room in arb_room()) {
            let layout = place(&wants, &room);
            match &layout.why {
                Why::Short { short, global, .. } => {
                    let total: Bandwidth = wants.iter().map(|w| w.wanted).sum();
                    prop_assert!(total > *global);
                    for s in short {
                        prop_assert!(s.fits < s.used && s.fits <= s.wanted);
                    }
                }
                // Every want is given in full: never below what it used.
                _ => prop_assert!(wants.iter().all(|w| w.wanted >= w.used)),
            }
        }

        #[test]
        fn a_share_is_never_below_use_nor_the_floor(used in 0u64..2_000_000, floor in 0u64..200_000, threads in 1usize..8, headroom in 0u32..100) {
            let s = share_wanted(Bandwidth(used), Bandwidth(floor), threads, headroom);
            prop_assert!(s >= Bandwidth(used));
            prop_assert!(s >= Bandwidth(floor / threads as u64));
        }
    }
}
