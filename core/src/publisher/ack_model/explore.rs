//! The breadth-first search of every reachable state, and the shortest trace to the first
//! violation it finds.

use std::collections::{HashSet, VecDeque};
use std::hash::BuildHasherDefault;
use std::time::Instant;

use super::model::*;
use super::pack::*;
use super::transitions::*;

/// The search gives up beyond this many states rather than exhaust the machine's memory.
pub(super) const MAX_STATES: usize = 8_000_000;

pub(super) type Seen = HashSet<Key, BuildHasherDefault<FxHasher>>;

pub(super) struct Counterexample {
    pub(super) violation: String,
    pub(super) trace: Vec<Action>,
    pub(super) last: State,
}

pub(super) struct Outcome {
    pub(super) states: usize,
    pub(super) seconds: f64,
    pub(super) counterexample: Option<Counterexample>,
}

/// Breadth-first search of every reachable state; stops at the first violation, which is
/// then one at the end of a shortest trace.
pub(super) fn explore(cfg: &Config) -> Outcome {
    let start = Instant::now();
    let init = State::initial(cfg);
    assert!(init.violation(cfg).is_none());
    let mut seen = Seen::default();
    // For state number i: (number of its parent, the action that led to it).
    let mut parents: Vec<(u32, Option<Action>)> = vec![(0, None)];
    let mut queue = VecDeque::new();
    seen.insert(init.key());
    queue.push_back((init, 0u32));
    while let Some((state, id)) = queue.pop_front() {
        for (action, next) in state.successors(cfg) {
            if !seen.insert(next.key()) {
                continue;
            }
            // A bound on memory (about 100 bytes a state), should the bounds ever be raised.
            assert!(seen.len() <= MAX_STATES, "more than {MAX_STATES} states");
            let next_id = u32::try_from(parents.len()).expect("fewer than 2^32 states");
            parents.push((id, Some(action)));
            if let Some(violation) = next.violation(cfg) {
                return Outcome {
                    states: seen.len(),
                    seconds: start.elapsed().as_secs_f64(),
                    counterexample: Some(Counterexample {
                        violation,
                        trace: trace_to(&parents, next_id),
                        last: next,
                    }),
                };
            }
            queue.push_back((next, next_id));
        }
    }
    Outcome {
        states: seen.len(),
        seconds: start.elapsed().as_secs_f64(),
        counterexample: None,
    }
}

pub(super) fn trace_to(parents: &[(u32, Option<Action>)], mut id: u32) -> Vec<Action> {
    let mut trace = Vec::new();
    while let (parent, Some(action)) = parents[id as usize] {
        trace.push(action);
        id = parent;
    }
    trace.reverse();
    trace
}

/// Replay a trace for printing (an action names its successor uniquely).
pub(super) fn print_trace(cfg: &Config, c: &Counterexample) {
    println!("  counterexample, {} steps:", c.trace.len());
    let mut state = State::initial(cfg);
    for (i, action) in c.trace.iter().enumerate() {
        let (_, next) = state
            .successors(cfg)
            .into_iter()
            .find(|(a, _)| a == action)
            .expect("the trace replays");
        println!("  {:>3}. {action}", i + 1);
        state = next;
    }
    assert_eq!(state, c.last);
    println!("  final state: {state}");
    println!("  violation: {}", c.violation);
}

pub(super) fn run(name: &str, cfg: Config) -> Outcome {
    let outcome = explore(&cfg);
    println!(
        "{name}: ring {} x {} frames, sessions A {} B {}: {} states in {:.2} s",
        cfg.ring_size,
        cfg.frames,
        cfg.sessions[0],
        cfg.sessions[1],
        outcome.states,
        outcome.seconds
    );
    if let Some(c) = &outcome.counterexample {
        print_trace(&cfg, c);
    }
    outcome
}
