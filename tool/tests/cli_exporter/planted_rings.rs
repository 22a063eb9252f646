//! Rings planted in /dev/shm by anyone who may create files there: capped, counted, quick,
//! and never an alive publisher.

use cuframes_test_support as common;

use std::time::{Duration, Instant};

use common::{frame_shm_name, publish_filler, shm_path, TestEnv};
use cuframes_core::publisher::{FrameRingConfig, Publisher};
use cuframes_core::wire::Format;

use super::exposition::{find, must, parse_metrics, Sample};
use super::harness::{get, new_agent, start_exporter, Exporter, Planted};

/// 2000 planted rings with 31 subscribers each (uncapped, a 40-45 MB body and 2.5 s a
/// scrape): one scrape shows at most --max-rings keys (256) and --max-subscribers
/// subscribers (1024), a real publisher first even though every planted key sorts before
/// it, counts the rest, and is quick.
#[test]
fn planted_rings_are_capped_counted_and_quick() {
    let env = TestEnv::new("exp-plant");
    let real = TestEnv::new("zz-real"); // sorts after every planted key
    let planted = Planted::new(&env, 2000);
    let p = Publisher::create(&real.key, env.publisher_options()).unwrap();
    p.enable_frames(FrameRingConfig::new(Format::Bgra, 16, 16))
        .unwrap();
    let seq = publish_filler(&p);
    let mut e = Exporter::start(&env, &[], |_| {});
    let (body, took) = e.scrape_within(Duration::from_secs(6), "with 2000 planted rings");
    eprintln!(
        "{} planted rings: {} bytes in {took:?}",
        planted.paths.len(),
        body.len()
    );
    assert!(body.len() < 2 << 20, "{} bytes", body.len());
    let m = parse_metrics(&body);
    let shown = find(&m, "cuframes_up", &[]).len();
    assert_eq!(shown, 256, "keys shown");
    let rk = [("key", real.key.as_str())];
    assert_eq!(
        must(&m, "cuframes_publisher_alive", &rk),
        1.0,
        "the real one"
    );
    assert_eq!(must(&m, "cuframes_frame_seq", &rk), seq as f64);
    let omitted = must(&m, "cuframes_exporter_rings_omitted", &[]);
    assert!(
        shown as f64 + omitted >= 2001.0,
        "{shown} shown, {omitted} omitted"
    );
    let subs = find(&m, "cuframes_subscriber_alive", &[]).len();
    assert_eq!(subs, 1024, "subscribers shown");
    let subs_omitted = must(&m, "cuframes_exporter_subscribers_omitted", &[]);
    // Each planted ring shown has 31 subscribers. The rest of the 256 keys shown is the real
    // publisher and whatever else has objects in /dev/shm, which is machine-wide: other
    // tests' and users' rings take places in the list too.
    let planted_prefix = format!("{}-p", env.key);
    let planted_shown = find(&m, "cuframes_up", &[])
        .iter()
        .filter(|s| {
            s.labels
                .get("key")
                .is_some_and(|k| k.starts_with(&planted_prefix))
        })
        .count();
    assert!(planted_shown >= 200, "{planted_shown} planted rings shown");
    assert!(
        subs as f64 + subs_omitted >= planted_shown as f64 * 31.0,
        "{subs} subscribers shown, {subs_omitted} omitted, {planted_shown} planted rings shown"
    );
    // Many scrapers at once cost about one render each --reuse (1 s), never one each.
    let renders = |m: &[Sample]| must(m, "cuframes_exporter_renders_total", &[]);
    let before = renders(&m);
    let t = Instant::now();
    std::thread::scope(|s| {
        for i in 0..8 {
            let url = &e.url;
            s.spawn(move || {
                let agent = new_agent();
                for _ in 0..5 {
                    let (status, _, body) = get(&agent, url);
                    assert_eq!(status, 200, "scraper {i}");
                    assert!(body.len() < 2 << 20);
                }
            });
        }
    });
    let took = t.elapsed();
    let (body, _) = e.scrape_within(Duration::from_secs(6), "after 8 scrapers");
    let n = renders(&parse_metrics(&body)) - before;
    eprintln!("40 scrapes by 8 scrapers in {took:?}: {n} renders");
    assert!(n <= took.as_secs_f64() + 3.0, "{n} renders in {took:?}");
    drop(p);
}

/// A ring planted by another uid, with a valid header and `producer_pid` 1
/// (alive, but root's), is never shown as an alive publisher: `cuframes_publisher_alive 0`
/// and `cuframes_publisher_owner_mismatch 1`; a real publisher of another key in the same
/// scrape stays alive with no mismatch.
#[test]
fn a_fake_owner_ring_is_not_an_alive_publisher() {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root to create an object owned by another uid");
        return;
    }
    let env = TestEnv::new("exp-owner");
    let honest = TestEnv::new("exp-owner-real");
    let frame = frame_shm_name(&env.key);
    // Removes the planted ring, also on failure.
    struct Unlink(String);
    impl Drop for Unlink {
        fn drop(&mut self) {
            let _ = cuframes_core::shm::unlink(&self.0);
        }
    }
    let _planted = Unlink(frame.clone());
    {
        let (_fd, map) = cuframes_core::shm::create(&frame, 7424, 0o644).unwrap();
        let shm = cuframes_core::testing::FrameShm::new(map).unwrap();
        shm.initialise(
            &cuframes_core::format::FrameGeometry::new(Format::Nv12, 64, 32)
                .unwrap()
                .to_meta(),
            2,
            cuframes_core::wire::Policy::DropOldest,
            cuframes_core::wire::MemoryKind::HostMemfd,
            1,
        );
    }
    std::os::unix::fs::chown(shm_path(&frame), Some(65534), None).unwrap();
    // The honest publisher's socket must be in the exporter's runtime directory.
    let mut options = honest.publisher_options();
    options.runtime_dir = Some(env.dir.clone());
    let p = Publisher::create(&honest.key, options).unwrap();
    p.enable_frames(FrameRingConfig::new(Format::Nv12, 64, 32))
        .unwrap();
    publish_filler(&p);

    let (_kids, url) = start_exporter(&env, &[&env.key, &honest.key]);
    let (status, _, body) = get(&new_agent(), &url);
    assert_eq!(status, 200, "{body}");
    let s = parse_metrics(&body);
    let fake = [("key", env.key.as_str())];
    let real = [("key", honest.key.as_str())];
    assert_eq!(must(&s, "cuframes_publisher_alive", &fake), 0.0, "{body}");
    assert_eq!(
        must(&s, "cuframes_publisher_owner_mismatch", &fake),
        1.0,
        "{body}"
    );
    assert_eq!(must(&s, "cuframes_publisher_alive", &real), 1.0, "{body}");
    assert_eq!(
        must(&s, "cuframes_publisher_owner_mismatch", &real),
        0.0,
        "{body}"
    );
}
