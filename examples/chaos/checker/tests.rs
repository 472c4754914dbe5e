//! The checker on hand-made histories: each violation kind flagged, clean ones accepted.
use super::*;
use crate::keys_left::{pattern, KeyLeft};

const S: u64 = 1_000_000_000;

fn cfg() -> Config {
    Config {
        permits: 2,
        liveness_ns: 8 * S,
        loss_grace_ns: 5 * S,
    }
}

fn ev(t: u64, p: i32, ev: Ev, op: u64, lock: &str, mode: &str) -> Event {
    Event::new(t, p, ev).op(op).lock(lock, mode)
}

/// A hold granted at `from`, released at `to` (in ms), with `token`.
fn hold(p: i32, op: u64, lock: &str, mode: &str, from: u64, to: u64, token: u64) -> Vec<Event> {
    let ms = 1_000_000;
    let token = (mode != "sem").then_some(token);
    vec![
        ev(from * ms - ms / 2, p, Ev::Invoke, op, lock, mode),
        ev(from * ms, p, Ev::Ok, op, lock, mode).token(token),
        ev(to * ms, p, Ev::ReleaseStart, op, lock, mode).detail("release"),
        ev(to * ms + ms / 2, p, Ev::Released, op, lock, mode).detail("ok"),
    ]
}

fn fence(
    p: i32,
    op: u64,
    lock: &str,
    sent_ms: u64,
    acked_ms: u64,
    token: u64,
    outcome: &str,
) -> Vec<Event> {
    let mut e = ev(acked_ms * 1_000_000, p, Ev::Fence, op, lock, "plain")
        .token(Some(token))
        .detail(outcome);
    e.at = Some(sent_ms * 1_000_000);
    vec![e]
}

fn fault(id: u64, kind: &str, target: &str, from_ms: u64, to_ms: u64, loss: bool) -> Vec<Event> {
    let mut end = Event::new(to_ms * 1_000_000, NEMESIS, Ev::FaultEnd).op(id);
    end.data_loss = loss;
    vec![
        Event::new(from_ms * 1_000_000, NEMESIS, Ev::FaultStart)
            .op(id)
            .detail(kind)
            .target(target),
        end,
    ]
}

fn run(parts: Vec<Vec<Event>>) -> Report {
    let mut events: Vec<Event> = parts.into_iter().flatten().collect();
    events.sort_by_key(|e| (e.t, e.p));
    check(&events, &Ending::default(), &cfg())
}

fn properties(r: &Report) -> Vec<&'static str> {
    r.violations.iter().map(|v| v.property).collect()
}

#[test]
fn accepts_a_clean_history() {
    let r = run(vec![
        hold(0, 1, "plain:0", "plain", 10, 100, 1024),
        fence(0, 1, "plain:0", 20, 21, 1024, "written"),
        hold(1, 1, "plain:0", "plain", 101, 200, 2048),
        fence(1, 1, "plain:0", 110, 111, 2048, "written"),
        // The first holder's late write is refused: that is the fence working.
        fence(0, 1, "plain:0", 150, 151, 1024, "stale"),
        hold(2, 1, "rw:0", "read", 10, 100, 4096),
        hold(3, 1, "rw:0", "read", 20, 150, 4096),
        hold(4, 1, "rw:0", "write", 151, 160, 5120),
        hold(0, 2, "sem:0", "sem", 10, 100, 0),
        hold(1, 2, "sem:0", "sem", 20, 100, 0),
        hold(2, 2, "sem:0", "sem", 100, 120, 0),
    ]);
    assert!(r.is_clean(), "{:#?}", r.violations);
    assert_eq!(r.holds.len(), 8);
}

#[test]
fn flags_an_overlap_of_two_believed_holds() {
    let r = run(vec![
        hold(0, 1, "plain:0", "plain", 10, 100, 1024),
        hold(1, 1, "plain:0", "plain", 90, 200, 2048),
    ]);
    assert_eq!(properties(&r), ["mutual exclusion"]);
    assert!(
        r.violations[0].text.contains("for 0.010s"),
        "{}",
        r.violations[0].text
    );
    // A reader beside a writer is one too.
    let r = run(vec![
        hold(0, 1, "rw:0", "write", 10, 100, 1024),
        hold(1, 1, "rw:0", "read", 50, 200, 2048),
    ]);
    assert_eq!(properties(&r), ["mutual exclusion"]);
}

#[test]
fn a_hold_ends_at_its_loss() {
    let mut first = hold(0, 1, "plain:0", "plain", 10, 100, 1024);
    first.push(ev(60_000_000, 0, Ev::Lost, 1, "plain:0", "plain"));
    let r = run(vec![first, hold(1, 1, "plain:0", "plain", 70, 200, 2048)]);
    assert!(r.is_clean(), "{:#?}", r.violations);
}

#[test]
fn a_paused_hold_that_wakes_up_lost_ends_at_the_pause() {
    // c0 is stopped at 50 ms and continued at 300 ms; the first thing its hold shows then
    // is the loss, so c1's grant at 200 ms is no overlap.
    let mut first = hold(0, 1, "plain:0", "plain", 10, 320, 1024);
    first.push(ev(305_000_000, 0, Ev::Lost, 1, "plain:0", "plain"));
    let r = run(vec![
        first.clone(),
        fault(1, "pause", "c0", 50, 300, false),
        hold(1, 1, "plain:0", "plain", 200, 250, 2048),
    ]);
    assert!(r.is_clean(), "{:#?}", r.violations);
    // Without the pause it is an overlap.
    let r = run(vec![first, hold(1, 1, "plain:0", "plain", 200, 250, 2048)]);
    assert_eq!(properties(&r), ["mutual exclusion"]);
    // So is a hold that acted after SIGCONT before it looked.
    let mut acted = hold(0, 1, "plain:0", "plain", 10, 320, 1024);
    acted.extend(fence(0, 1, "plain:0", 301, 302, 1024, "written"));
    acted.push(ev(305_000_000, 0, Ev::Lost, 1, "plain:0", "plain"));
    let r = run(vec![
        acted,
        fault(1, "pause", "c0", 50, 300, false),
        hold(1, 1, "plain:0", "plain", 200, 250, 2048),
    ]);
    assert_eq!(properties(&r), ["mutual exclusion"]);
}

#[test]
fn a_killed_process_holds_nothing() {
    let r = run(vec![
        vec![ev(10_000_000, 0, Ev::Ok, 1, "plain:0", "plain").token(Some(1024))],
        fault(1, "kill", "c0", 50, 60, false),
        hold(1, 1, "plain:0", "plain", 100, 200, 2048),
    ]);
    assert!(r.is_clean(), "{:#?}", r.violations);
}

#[test]
fn counts_overlaps_inside_a_data_loss_window_apart() {
    let r = run(vec![
        hold(0, 1, "plain:0", "plain", 10, 400, 1024),
        fault(1, "restart_empty", "port 1", 100, 150, true),
        hold(1, 1, "plain:0", "plain", 160, 300, 2048),
    ]);
    assert!(r.is_clean(), "{:#?}", r.violations);
    assert_eq!(r.explained.len(), 1);
    // The same overlap without data loss is a violation.
    let r = run(vec![
        hold(0, 1, "plain:0", "plain", 10, 400, 1024),
        fault(1, "restart_aof", "port 1", 100, 150, false),
        hold(1, 1, "plain:0", "plain", 160, 300, 2048),
    ]);
    assert_eq!(properties(&r), ["mutual exclusion"]);
    // And two holds both granted long after the window are not explained by it.
    let r = run(vec![
        fault(1, "restart_empty", "port 1", 100, 150, true),
        hold(0, 1, "plain:0", "plain", 6_000, 6_400, 4096),
        hold(1, 1, "plain:0", "plain", 6_100, 6_300, 5120),
    ]);
    assert_eq!(properties(&r), ["mutual exclusion"]);
}

#[test]
fn flags_a_token_going_backwards_in_grant_order() {
    let r = run(vec![
        hold(0, 1, "plain:0", "plain", 10, 100, 2048),
        hold(1, 1, "plain:0", "plain", 110, 200, 1024),
    ]);
    assert_eq!(properties(&r), ["fencing"]);
    // A reader below the writer before it (what a data-loss failover once did).
    let r = run(vec![
        hold(0, 1, "rw:0", "write", 10, 100, 2048),
        hold(1, 1, "rw:0", "read", 110, 200, 1024),
    ]);
    assert_eq!(properties(&r), ["fencing"]);
    // Two reads are not ordered by their tokens: Redis grants them side by side, and a read
    // whose reply came late is believed after one Redis granted later (a proxy delay did
    // this in a 10-minute run). A writer after them may not reuse or go below their tokens.
    for later in [2048, 1024] {
        let r = run(vec![
            hold(0, 1, "rw:0", "read", 10, 100, 2048),
            hold(1, 1, "rw:0", "read", 110, 200, later),
        ]);
        assert!(r.is_clean(), "{:#?}", r.violations);
    }
    let r = run(vec![
        hold(0, 1, "rw:0", "read", 10, 100, 2048),
        hold(1, 1, "rw:0", "write", 110, 200, 2048),
    ]);
    assert_eq!(properties(&r), ["fencing"]);
}

#[test]
fn flags_a_superseded_holds_write_accepted() {
    let r = run(vec![
        hold(0, 1, "plain:0", "plain", 10, 100, 1024),
        hold(1, 1, "plain:0", "plain", 101, 200, 2048),
        fence(1, 1, "plain:0", 110, 111, 2048, "written"),
        fence(0, 1, "plain:0", 150, 151, 1024, "written"),
    ]);
    assert_eq!(properties(&r), ["fencing"]);
    assert!(r.violations[0].text.contains("superseded"));
    // Sent before the higher write was acknowledged: either order is fine.
    let r = run(vec![
        hold(0, 1, "plain:0", "plain", 10, 100, 1024),
        hold(1, 1, "plain:0", "plain", 101, 200, 2048),
        fence(1, 1, "plain:0", 110, 120, 2048, "written"),
        fence(0, 1, "plain:0", 115, 125, 1024, "written"),
    ]);
    assert!(r.is_clean(), "{:#?}", r.violations);
}

#[test]
fn flags_more_semaphore_holders_than_permits() {
    let r = run(vec![
        hold(0, 1, "sem:0", "sem", 10, 100, 0),
        hold(1, 1, "sem:0", "sem", 20, 100, 0),
        hold(2, 1, "sem:0", "sem", 30, 100, 0),
    ]);
    assert_eq!(properties(&r), ["semaphore"]);
}

fn key(key: &str, pttl: i64) -> KeyLeft {
    KeyLeft {
        key: key.to_owned(),
        ty: "string".to_owned(),
        pttl,
        port: 1,
    }
}

#[test]
fn flags_stranded_keys_and_keys_without_expiry_by_kind() {
    let keys = vec![
        key("dlock:{plain%3A0}", 900),
        key("dlock:fence:{3560}", 86_000_000),
        key("dlock:{plain%3A1}:latch:9f3c01", 4_000),
        key("dlock:{fair%3A0}:fair:queue", 700),
        key("redisson_lock_token:{rlock:0}", -1),
        key("redisson_lock_token:{rlock:1}", -1),
        key("redisson_unlock_latch:{rlock:0}:77ab", 3_000),
    ];
    let events = hold(0, 1, "plain:0", "plain", 10, 100, 1024);
    let ending = Ending {
        keys,
        unclean: Vec::new(),
    };
    let r = check(&events, &ending, &cfg());
    assert_eq!(
        properties(&r),
        [
            "keys without expiry",
            "nothing stranded",
            "nothing stranded"
        ]
    );
    assert!(
        r.violations[0]
            .text
            .starts_with("redisson_lock_token:{*}: 2 key(s)"),
        "{}",
        r.violations[0].text
    );
    // After an unclean exit a lease may still be live; a key that never expires is still one.
    let ending = Ending {
        keys: ending.keys,
        unclean: vec!["c1 did not exit".into()],
    };
    let r = check(&events, &ending, &cfg());
    assert_eq!(properties(&r), ["keys without expiry", "clean exit"]);
}

#[test]
fn names_a_keys_kind_without_its_lock_name_or_ids() {
    assert_eq!(pattern("dlock:{plain%3A0}:latch:9f3c"), "dlock:{*}:latch:#");
    assert_eq!(pattern("dlock:{rw%3A0}:rw:readers"), "dlock:{*}:rw:readers");
    assert_eq!(pattern("rlock:0"), "rlock:#");
    assert_eq!(
        pattern("{rrw:0}:1b4e28ba-2fa1-41d2-883f-0016d3cca427:7:rwlock_timeout:1"),
        "{*}:#:#:rwlock_timeout:#"
    );
}

#[test]
fn flags_a_waiter_or_release_giving_up_on_a_transient_reply() {
    let ms = 1_000_000;
    let mut invoke = ev(100 * ms, 0, Ev::Invoke, 1, "plain:0", "plain");
    invoke.wait = Some(3_000);
    let fail = |t: u64, code: &str| {
        ev(t * ms, 0, Ev::Fail, 1, "plain:0", "plain").detail(format!("redis {code}"))
    };
    let r = run(vec![vec![invoke.clone(), fail(600, "LOADING")]]);
    assert_eq!(properties(&r), ["waiters ride out transient replies"]);
    // After its wait, or with no wait, or another error: the caller's answer.
    let r = run(vec![vec![invoke.clone(), fail(3_200, "LOADING")]]);
    assert!(r.is_clean(), "{:#?}", r.violations);
    let r = run(vec![vec![invoke.clone(), fail(600, "WRONGTYPE")]]);
    assert!(r.is_clean(), "{:#?}", r.violations);
    invoke.wait = Some(0);
    let r = run(vec![vec![invoke, fail(101, "TRYAGAIN")]]);
    assert!(r.is_clean(), "{:#?}", r.violations);
    let mut h = hold(0, 2, "plain:0", "plain", 10, 100, 1024);
    h[3].detail = Some("redis LOADING".into());
    let r = run(vec![h]);
    assert_eq!(properties(&r), ["releases ride out transient replies"]);
}

#[test]
fn checks_redisson_kinds_by_what_they_promise() {
    // RLock: exclusion, no token order.
    let r = run(vec![
        hold(0, 1, "rlock:0", "rlock", 10, 100, 9),
        hold(1, 1, "rlock:0", "rlock", 110, 200, 3),
    ]);
    assert!(r.is_clean(), "{:#?}", r.violations);
    let r = run(vec![
        hold(0, 1, "rlock:0", "rlock", 10, 100, 1),
        hold(1, 1, "rlock:0", "rlock", 90, 200, 2),
    ]);
    assert_eq!(properties(&r), ["mutual exclusion"]);
    // RReadWriteLock: readers side by side, tokens rising; a counter lost with the data may
    // start again (explained), not otherwise.
    let r = run(vec![
        hold(0, 1, "rrw:0", "rread", 10, 100, 5),
        hold(1, 1, "rrw:0", "rread", 20, 100, 6),
        hold(2, 1, "rrw:0", "rwrite", 110, 200, 4),
    ]);
    assert_eq!(properties(&r), ["fencing"]);
    let r = run(vec![
        hold(0, 1, "rrw:0", "rwrite", 10, 100, 5),
        fault(1, "restart_empty", "port 1", 120, 150, true),
        hold(1, 1, "rrw:0", "rwrite", 160, 200, 1),
        hold(2, 1, "rrw:0", "rwrite", 210, 300, 2),
    ]);
    assert!(r.is_clean(), "{:#?}", r.violations);
    assert_eq!(r.explained.len(), 1, "{:#?}", r.explained);
    // Once the window closed, the new counter must rise again.
    let r = run(vec![
        hold(0, 1, "rrw:0", "rwrite", 10, 100, 5),
        fault(1, "restart_empty", "port 1", 120, 150, true),
        hold(1, 1, "rrw:0", "rwrite", 160, 200, 2),
        hold(2, 1, "rrw:0", "rwrite", 6_000, 6_100, 1),
    ]);
    assert_eq!(properties(&r), ["fencing"]);
}

#[test]
fn flags_a_client_not_granted_after_the_last_fault() {
    let mut late = vec![
        hold(0, 1, "plain:0", "plain", 10, 100, 1024),
        hold(1, 1, "plain:0", "plain", 200, 300, 2048),
        fault(1, "freeze", "c1", 1_000, 2_000, false),
        hold(0, 2, "plain:0", "plain", 2_100, 2_200, 4096),
        hold(1, 2, "plain:0", "plain", 12_000, 12_100, 5120),
    ];
    late.push(vec![
        Event::new(13_000_000_000, NEMESIS, Ev::Note).detail("stop")
    ]);
    let r = run(late);
    assert_eq!(properties(&r), ["liveness"]);
    assert!(r.violations[0].text.contains("c1"));
    assert_eq!(r.liveness[&0], Some(100_000_000));
}

#[test]
fn a_synced_client_refused_for_want_of_replicas_is_reported_not_flagged() {
    let ms = 1_000_000;
    let mut parts = vec![
        hold(0, 1, "plain:0", "plain", 10, 100, 1024),
        hold(1, 1, "plain:0", "plain", 200, 300, 2048),
        fault(1, "kill_master", "primary", 1_000, 2_000, false),
        hold(0, 2, "plain:0", "plain", 2_100, 2_200, 4096),
    ];
    // c1 is answered all along after the heal, every time NotSynced (or a wait that ran out).
    for (i, at) in [2_500u64, 5_000, 9_000, 11_000].into_iter().enumerate() {
        let op = 10 + i as u64;
        let detail = if i == 1 { "timeout" } else { "not_synced" };
        parts.push(vec![
            ev(at * ms, 1, Ev::Invoke, op, "plain:0", "plain"),
            ev((at + 500) * ms, 1, Ev::Fail, op, "plain:0", "plain").detail(detail),
        ]);
    }
    parts.push(vec![
        Event::new(13_000 * ms, NEMESIS, Ev::Note).detail("stop")
    ]);
    let r = run(parts.clone());
    assert!(properties(&r).is_empty(), "{:?}", properties(&r));
    assert_eq!(r.unconfirmable, [1]);
    // The same silence with another answer (a Redis error) is a liveness violation.
    let last = parts.len() - 2;
    parts[last][1] = ev(11_500 * ms, 1, Ev::Fail, 13, "plain:0", "plain").detail("redis");
    let mut all_redis = parts;
    for part in all_redis.iter_mut() {
        for e in part.iter_mut() {
            if e.p == 1 && e.ev == Ev::Fail {
                *e = e.clone().detail("redis");
            }
        }
    }
    let r = run(all_redis);
    assert_eq!(properties(&r), ["liveness"]);
}

#[test]
fn measures_how_long_an_acquire_waited_on_a_lock_nobody_held() {
    let ms = 1_000_000;
    let mut waiter = hold(1, 1, "plain:0", "plain", 400, 500, 2048);
    waiter[0].t = 50 * ms;
    let r = run(vec![hold(0, 1, "plain:0", "plain", 10, 100, 1024), waiter]);
    let w = &r.free_waits[0];
    assert_eq!((w.p, w.free), (1, 300 * ms), "{w:?}");
    assert!(w.faults.is_empty());
    // A read waits on nothing that another read holds.
    let mut reader = hold(1, 1, "rw:0", "read", 400, 500, 2048);
    reader[0].t = 50 * ms;
    let r = run(vec![hold(0, 1, "rw:0", "read", 10, 450, 1024), reader]);
    assert_eq!(r.free_waits[0].free, 350 * ms);
}

#[test]
fn flags_an_acquire_answering_long_after_its_wait() {
    let ms = 1_000_000;
    let mut invoke = ev(100 * ms, 0, Ev::Invoke, 1, "rw:0", "write");
    invoke.wait = Some(1_000);
    let fail = ev(6_000 * ms, 0, Ev::Fail, 1, "rw:0", "write").detail("redis");
    let r = run(vec![vec![invoke.clone(), fail.clone()]]);
    assert_eq!(properties(&r), ["acquires answer within their wait"]);
    // Not when its process was stopped meanwhile, nor within the slack.
    let r = run(vec![
        vec![invoke.clone(), fail],
        fault(1, "pause", "c0", 2_000, 5_000, false),
    ]);
    assert!(r.is_clean(), "{:#?}", r.violations);
    let ok = ev(4_500 * ms, 0, Ev::Ok, 1, "rw:0", "write").token(Some(9));
    let r = run(vec![vec![invoke, ok]]);
    assert!(r.is_clean(), "{:#?}", r.violations);
}

#[test]
fn reads_postgres_not_now_as_a_transient_reply_and_unreachable_as_an_answer() {
    let ms = 1_000_000;
    let mut invoke = ev(100 * ms, 0, Ev::Invoke, 1, "plain:0", "plain");
    invoke.wait = Some(3_000);
    let fail = |detail: &str| ev(600 * ms, 0, Ev::Fail, 1, "plain:0", "plain").detail(detail);
    let r = run(vec![vec![invoke.clone(), fail("postgres not_now")]]);
    assert_eq!(properties(&r), ["waiters ride out transient replies"]);
    // A broken link before any refusal is the caller's answer on either store.
    let r = run(vec![vec![invoke, fail("postgres unreachable")]]);
    assert!(r.is_clean(), "{:#?}", r.violations);
}

#[test]
fn keeps_postgres_fences_latches_and_expired_rows_and_flags_live_ones() {
    let keys = vec![
        key("pg:fences:dlock:{plain%3A0}:fence", 86_000_000),
        key("pg:latches:dlock:{plain%3A0}:latch:9f3c:1", 20_000),
        key("pg:holds(expired):dlock:{plain%3A1}", 0),
        key("pg:permits(expired):dlock:{sem%3A0}:sem", 0),
        key("pg:holds:dlock:{plain%3A2}", 1_500),
        key("pg:permits:dlock:{sem%3A0}:sem", -1),
    ];
    let ending = Ending {
        keys,
        unclean: Vec::new(),
    };
    let r = check(&[], &ending, &cfg());
    assert_eq!(
        properties(&r),
        ["keys without expiry", "nothing stranded"],
        "{:#?}",
        r.violations
    );
    assert!(r.violations[1].text.starts_with("pg:holds:dlock:{*}: 1"));
}
