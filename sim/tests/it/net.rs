//! The simulated network under the deterministic executor: in-order exactly-once delivery
//! under delays and spikes, partitions, resets, and determinism.

use cairn_engine::env::{read_exact, ByteStream, Clock, Net, Tasks};
use cairn_faults::{NetEvent, NetFaults, SimClock, SimNet};
use cairn_sim::executor::{Executor, Stop};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};

const SERVER: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
const CLIENT: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));

fn addr() -> SocketAddr {
    SocketAddr::new(SERVER, 9000)
}

/// Starts an echo server; returns the client results and the virtual time at the end.
fn echo(
    seed: u64,
    faults: NetFaults,
    messages: usize,
) -> (Vec<std::io::Result<Vec<u8>>>, u64, Vec<NetEvent>) {
    let clock = SimClock::new();
    let mut executor = Executor::new(seed, clock.clone());
    let tasks = executor.handle();
    let net = SimNet::new(seed, clock.clone(), faults);
    let server_net = net.host(SERVER);
    let client_net = net.host(CLIENT);
    let spawner = tasks.clone();
    tasks.spawn(Box::pin(async move {
        let mut listener = server_net.listen(addr()).await.expect("listen");
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            spawner.spawn(Box::pin(async move {
                let mut buf = [0u8; 4096];
                loop {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            if stream.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            }));
        }
    }));
    let results = Arc::new(Mutex::new(Vec::new()));
    let out = results.clone();
    tasks.spawn(Box::pin(async move {
        let mut stream = match client_net.connect(addr()).await {
            Ok(stream) => stream,
            Err(e) => {
                out.lock().unwrap().push(Err(e));
                return;
            }
        };
        for i in 0..messages {
            let message: Vec<u8> = (0..(i * 37 % 3000 + 1)).map(|j| (i + j) as u8).collect();
            let result = async {
                stream.write_all(&message).await?;
                let mut back = vec![0u8; message.len()];
                read_exact(stream.as_mut(), &mut back).await?;
                Ok(back)
            }
            .await;
            let failed = result.is_err();
            out.lock().unwrap().push(result);
            if failed {
                return;
            }
        }
        stream.shutdown().await.unwrap();
    }));
    let stop = executor.run(1_000_000, 3_600_000_000_000);
    assert!(matches!(stop, Stop::Stalled | Stop::Done), "{stop:?}");
    let results = std::mem::take(&mut *results.lock().unwrap());
    (results, clock.now_nanos(), net.events())
}

#[test]
fn bytes_arrive_in_order_exactly_once_under_delays_and_spikes() {
    let faults = NetFaults {
        delay_nanos: (10_000, 2_000_000),
        spike: Some(0.2),
        reset: None,
        ..NetFaults::default()
    };
    let (results, elapsed, events) = echo(3, faults, 60);
    assert_eq!(results.len(), 60);
    for (i, result) in results.into_iter().enumerate() {
        let expected: Vec<u8> = (0..(i * 37 % 3000 + 1)).map(|j| (i + j) as u8).collect();
        assert_eq!(result.unwrap(), expected, "message {i}");
    }
    assert!(events
        .iter()
        .any(|e| matches!(e, NetEvent::DelaySpike { .. })));
    assert!(elapsed > 200_000_000, "spikes cost virtual time: {elapsed}");
}

#[test]
fn the_same_seed_gives_the_same_timing() {
    let faults = NetFaults {
        delay_nanos: (10_000, 2_000_000),
        spike: Some(0.1),
        reset: None,
        ..NetFaults::default()
    };
    let (_, a, events_a) = echo(9, faults, 30);
    let (_, b, events_b) = echo(9, faults, 30);
    assert_eq!((a, events_a), (b, events_b));
    let (_, c, _) = echo(10, faults, 30);
    assert_ne!(a, c);
}

#[test]
fn resets_surface_as_errors_to_both_ends() {
    let faults = NetFaults {
        delay_nanos: (10_000, 100_000),
        spike: None,
        reset: Some(0.2),
        ..NetFaults::default()
    };
    let (results, _, events) = echo(5, faults, 50);
    let last = results.last().expect("some result");
    assert_eq!(
        last.as_ref().unwrap_err().kind(),
        std::io::ErrorKind::ConnectionReset
    );
    assert!(events.iter().any(|e| matches!(e, NetEvent::Reset { .. })));
}

#[test]
fn a_partition_refuses_connects_until_healed() {
    let clock = SimClock::new();
    let mut executor = Executor::new(1, clock.clone());
    let net = SimNet::new(1, clock.clone(), NetFaults::default());
    net.partition(SERVER, CLIENT);
    let (server_net, client_net) = (net.host(SERVER), net.host(CLIENT));
    let outcomes = Arc::new(Mutex::new(Vec::new()));
    let out = outcomes.clone();
    let healer = net.clone();
    executor.handle().spawn(Box::pin(async move {
        let _listener = server_net.listen(addr()).await.unwrap();
        let refused = client_net
            .connect(addr())
            .await
            .map(|_| ())
            .map_err(|e| e.kind());
        out.lock().unwrap().push(refused);
        healer.heal();
        let healed = client_net
            .connect(addr())
            .await
            .map(|_| ())
            .map_err(|e| e.kind());
        out.lock().unwrap().push(healed);
    }));
    assert_eq!(executor.run(10_000, u64::MAX), Stop::Done);
    assert_eq!(
        *outcomes.lock().unwrap(),
        vec![Err(std::io::ErrorKind::TimedOut), Ok(())]
    );
}

/// Runs `client` against a server task `server` on one connection, to the end.
fn pair<S, C>(faults: NetFaults, server: S, client: C) -> (SimNet, Stop)
where
    S: FnOnce(Box<dyn ByteStream>, SimNet, SimClock) -> cairn_engine::env::BoxFuture<'static, ()>
        + Send
        + 'static,
    C: FnOnce(Box<dyn ByteStream>, SimNet, SimClock) -> cairn_engine::env::BoxFuture<'static, ()>
        + Send
        + 'static,
{
    let clock = SimClock::new();
    let mut executor = Executor::new(7, clock.clone());
    let tasks = executor.handle();
    let net = SimNet::new(7, clock.clone(), faults);
    let (server_net, client_net) = (net.host(SERVER), net.host(CLIENT));
    let (n1, c1, n2, c2) = (net.clone(), clock.clone(), net.clone(), clock.clone());
    let spawner = tasks.clone();
    tasks.spawn(Box::pin(async move {
        let mut listener = server_net.listen(addr()).await.expect("listen");
        let (stream, _) = listener.accept().await.expect("accept");
        spawner.spawn(server(stream, n1, c1));
        // Keep listening (a dropped listener is gone from the network).
        let _ = listener.accept().await;
    }));
    tasks.spawn(Box::pin(async move {
        let stream = client_net.connect(addr()).await.expect("connect");
        client(stream, n2, c2).await;
    }));
    let stop = executor.run(10_000_000, 3_600_000_000_000);
    (net, stop)
}

type Log = Arc<Mutex<Vec<String>>>;

#[test]
fn a_full_pipe_makes_the_writer_wait_for_the_reader() {
    let faults = NetFaults {
        pipe_capacity: 1024,
        ..NetFaults::default()
    };
    let got: Arc<Mutex<Vec<u8>>> = Arc::default();
    let log: Log = Arc::default();
    let (g, l1, l2) = (got.clone(), log.clone(), log.clone());
    let payload: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    let expected = payload.clone();
    let (net, _) = pair(
        faults,
        move |mut stream, _, clock| {
            Box::pin(async move {
                let mut buf = [0u8; 4096];
                loop {
                    // A slow reader.
                    clock.sleep(std::time::Duration::from_millis(1)).await;
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            assert!(n <= 1024, "a read never holds more than the pipe: {n}");
                            g.lock().unwrap().extend_from_slice(&buf[..n]);
                        }
                    }
                }
                l1.lock()
                    .unwrap()
                    .push(format!("reader done at {}", clock.now_nanos()));
            })
        },
        move |mut stream, _, clock| {
            Box::pin(async move {
                stream.write_all(&payload).await.unwrap();
                l2.lock()
                    .unwrap()
                    .push(format!("writer done at {}", clock.now_nanos()));
                stream.shutdown().await.unwrap();
            })
        },
    );
    assert_eq!(*got.lock().unwrap(), expected, "every byte, in order");
    assert!(net
        .events()
        .iter()
        .any(|e| matches!(e, NetEvent::BackPressure { .. })));
    let log = log.lock().unwrap();
    let writer_done: u64 = log[0].rsplit(' ').next().unwrap().parse().unwrap();
    assert!(
        writer_done > 90_000_000,
        "the write finished only as the 1 ms-per-read reader drained it: {log:?}"
    );
}

/// Seed 0x5c87728: a spike drawn once per write delayed every pipe-full of a 72 KB reply
/// (12 s for 64 KiB over a 4 KiB pipe), and went on after the faults healed. A spike is a
/// chunk's: chunks queued after the heal travel at the healed delay.
#[test]
fn a_spike_delays_its_chunk_and_chunks_sent_after_a_heal_travel_healed() {
    let faults = NetFaults {
        delay_nanos: (10_000, 20_000),
        spike: Some(1.0),
        pipe_capacity: 4096,
        ..NetFaults::default()
    };
    let log: Log = Arc::default();
    let l1 = log.clone();
    pair(
        faults,
        move |mut stream, net, clock| {
            Box::pin(async move {
                // The writer's first chunk is under way (spiked) when the faults heal.
                clock.sleep(std::time::Duration::from_millis(1)).await;
                net.set_faults(NetFaults {
                    spike: None,
                    ..faults
                });
                l1.lock()
                    .unwrap()
                    .push(format!("healed {}", clock.now_nanos()));
                let mut got = vec![0u8; 64 * 1024];
                read_exact(stream.as_mut(), &mut got).await.unwrap();
                l1.lock()
                    .unwrap()
                    .push(format!("read {}", clock.now_nanos()));
            })
        },
        move |mut stream, _, _| {
            Box::pin(async move {
                stream.write_all(&vec![7u8; 64 * 1024]).await.unwrap();
            })
        },
    );
    let log = log.lock().unwrap();
    let at = |what: &str| -> u64 {
        let line = log.iter().find(|l| l.starts_with(what)).expect(what);
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    let spiked = at("read") - at("healed");
    // One spike (under 1 s) for the first chunk, then 15 healed chunks of under 1 ms each.
    assert!(
        (200_000_000..1_100_000_000).contains(&spiked),
        "one spike, not one per pipe-full: {log:?}"
    );
}

/// A closed socket answers data with an RST: a writer blocked on a full pipe to a peer that
/// dropped its end fails at once, instead of waiting for its own timeout (seed 0x5c87728:
/// the server held a dropped client's reply, and its user's share, for 30 s).
#[test]
fn a_writer_to_a_dropped_end_is_reset() {
    let faults = NetFaults {
        pipe_capacity: 1024,
        ..NetFaults::default()
    };
    let log: Log = Arc::default();
    let (l1, l2) = (log.clone(), log.clone());
    pair(
        faults,
        move |mut stream, _, clock| {
            Box::pin(async move {
                let written = stream.write_all(&vec![1u8; 100_000]).await;
                let kind = written.map_err(|e| e.kind());
                l1.lock()
                    .unwrap()
                    .push(format!("write {kind:?} at {}", clock.now_nanos()));
            })
        },
        move |mut stream, _, clock| {
            Box::pin(async move {
                let mut some = [0u8; 100];
                read_exact(stream.as_mut(), &mut some).await.unwrap();
                drop(stream);
                l2.lock()
                    .unwrap()
                    .push(format!("dropped at {}", clock.now_nanos()));
            })
        },
    );
    let log = log.lock().unwrap();
    assert_eq!(log.len(), 2, "{log:?}");
    assert!(log[0].starts_with("dropped"), "{log:?}");
    assert!(log[1].starts_with("write Err(ConnectionReset)"), "{log:?}");
    let at = |line: &str| -> u64 { line.rsplit(' ').next().unwrap().parse().unwrap() };
    assert!(
        at(&log[1]) - at(&log[0]) < 100_000_000,
        "the writer learns within a round trip: {log:?}"
    );
}

#[test]
fn reads_split_and_join_writes_at_seeded_points() {
    let sizes: Arc<Mutex<Vec<usize>>> = Arc::default();
    let s = sizes.clone();
    let (_, _) = pair(
        NetFaults::default(),
        move |mut stream, _, clock| {
            Box::pin(async move {
                // Let several writes arrive before reading, so reads can join them.
                clock.sleep(std::time::Duration::from_millis(50)).await;
                let mut buf = [0u8; 4096];
                while let Ok(n) = stream.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    s.lock().unwrap().push(n);
                }
            })
        },
        move |mut stream, _, _| {
            Box::pin(async move {
                for _ in 0..200 {
                    stream.write_all(&[1u8; 100]).await.unwrap();
                }
                stream.shutdown().await.unwrap();
            })
        },
    );
    let sizes = sizes.lock().unwrap();
    assert_eq!(sizes.iter().sum::<usize>(), 20_000);
    assert!(
        sizes.iter().any(|&n| n > 100),
        "some read joined writes: {sizes:?}"
    );
    assert!(
        sizes.iter().any(|&n| n % 100 != 0),
        "some read ended inside a write: {sizes:?}"
    );
}

#[test]
fn a_reset_cuts_a_write_and_the_reader_gets_a_prefix_then_the_reset() {
    let faults = NetFaults {
        reset: Some(1.0),
        ..NetFaults::default()
    };
    let got: Arc<Mutex<(Vec<u8>, Option<std::io::ErrorKind>)>> = Arc::default();
    let g = got.clone();
    let written: Arc<Mutex<Option<std::io::ErrorKind>>> = Arc::default();
    let w = written.clone();
    let (net, _) = pair(
        faults,
        move |mut stream, _, _| {
            Box::pin(async move {
                let mut buf = [0u8; 4096];
                loop {
                    match stream.read(&mut buf).await {
                        Ok(0) => break,
                        Ok(n) => g.lock().unwrap().0.extend_from_slice(&buf[..n]),
                        Err(e) => {
                            g.lock().unwrap().1 = Some(e.kind());
                            break;
                        }
                    }
                }
            })
        },
        move |mut stream, _, _| {
            Box::pin(async move {
                let result = stream.write_all(&[9u8; 3000]).await;
                *w.lock().unwrap() = result.err().map(|e| e.kind());
            })
        },
    );
    let delivered = net
        .events()
        .iter()
        .find_map(|e| match e {
            NetEvent::Reset { delivered, .. } => Some(*delivered),
            _ => None,
        })
        .expect("a reset");
    let got = got.lock().unwrap();
    assert_eq!(
        got.0,
        vec![9u8; delivered],
        "the reader got the prefix sent before the reset"
    );
    assert_eq!(got.1, Some(std::io::ErrorKind::ConnectionReset));
    assert_eq!(
        *written.lock().unwrap(),
        Some(std::io::ErrorKind::ConnectionReset)
    );
}

#[test]
fn a_power_loss_leaves_the_peer_half_open_until_the_host_boots_again() {
    let faults = NetFaults {
        pipe_capacity: 4096,
        ..NetFaults::default()
    };
    let log: Log = Arc::default();
    let l = log.clone();
    let (net, _) = pair(
        faults,
        move |stream, net, clock| {
            Box::pin(async move {
                // The server's host loses power; its process (this task) is gone.
                clock.sleep(std::time::Duration::from_millis(5)).await;
                net.power_off(SERVER);
                drop(stream);
            })
        },
        move |mut stream, net, clock| {
            Box::pin(async move {
                clock.sleep(std::time::Duration::from_millis(10)).await;
                let mut buf = [0u8; 16];
                let second = std::time::Duration::from_secs(1);
                let read =
                    cairn_engine::env::race(stream.read(&mut buf), clock.sleep(second)).await;
                l.lock().unwrap().push(match read {
                    cairn_engine::env::Either::Left(r) => format!("read {r:?}"),
                    cairn_engine::env::Either::Right(()) => "read waited".into(),
                });
                let big = vec![0u8; 64 * 1024];
                let wrote =
                    cairn_engine::env::race(stream.write_all(&big), clock.sleep(second)).await;
                l.lock().unwrap().push(match wrote {
                    cairn_engine::env::Either::Left(r) => format!("write {r:?}"),
                    cairn_engine::env::Either::Right(()) => "write waited".into(),
                });
                net.power_on(SERVER);
                let read = stream.read(&mut buf).await;
                l.lock()
                    .unwrap()
                    .push(format!("after boot {:?}", read.map_err(|e| e.kind())));
            })
        },
    );
    assert_eq!(
        *log.lock().unwrap(),
        vec![
            "read waited".to_string(),
            "write waited".to_string(),
            "after boot Err(ConnectionReset)".to_string(),
        ],
        "half-open: no end of stream, writes fill the pipe and wait; reset after the reboot"
    );
    assert!(net
        .events()
        .iter()
        .any(|e| matches!(e, NetEvent::StaleConnection { .. })));
}

#[test]
fn a_one_way_cut_holds_one_direction_and_lets_the_other_flow() {
    let log: Log = Arc::default();
    let (l1, l2) = (log.clone(), log.clone());
    let (_, _) = pair(
        NetFaults::default(),
        move |mut stream, net, clock| {
            Box::pin(async move {
                // Server to client is cut: the client still hears nothing of "pong" until
                // the cut heals, while the server reads the client's "ping".
                net.cut_one_way(SERVER, CLIENT);
                let mut ping = [0u8; 4];
                read_exact(&mut *stream, &mut ping).await.unwrap();
                l1.lock()
                    .unwrap()
                    .push(format!("server read {}", String::from_utf8_lossy(&ping)));
                stream.write_all(b"pong").await.unwrap();
                clock.sleep(std::time::Duration::from_secs(5)).await;
                l1.lock().unwrap().push("healed".into());
                net.heal_partition(SERVER, CLIENT);
                clock.sleep(std::time::Duration::from_secs(5)).await;
            })
        },
        move |mut stream, _, _| {
            Box::pin(async move {
                stream.write_all(b"ping").await.unwrap();
                let mut pong = [0u8; 4];
                read_exact(&mut *stream, &mut pong).await.unwrap();
                l2.lock()
                    .unwrap()
                    .push(format!("client read {}", String::from_utf8_lossy(&pong)));
            })
        },
    );
    assert_eq!(
        *log.lock().unwrap(),
        ["server read ping", "healed", "client read pong"],
        "the cut direction waited for the heal, the other did not"
    );
}

#[test]
fn a_connect_needs_both_directions() {
    for (from, to) in [(SERVER, CLIENT), (CLIENT, SERVER)] {
        let clock = SimClock::new();
        let mut executor = Executor::new(3, clock.clone());
        let net = SimNet::new(3, clock.clone(), NetFaults::default());
        net.cut_one_way(from, to);
        let (server_net, client_net) = (net.host(SERVER), net.host(CLIENT));
        let outcome = Arc::new(Mutex::new(None));
        let out = outcome.clone();
        executor.handle().spawn(Box::pin(async move {
            let _listener = server_net.listen(addr()).await.unwrap();
            let connect = client_net
                .connect(addr())
                .await
                .map(|_| ())
                .map_err(|e| e.kind());
            *out.lock().unwrap() = Some(connect);
        }));
        executor.run(10_000, u64::MAX);
        assert_eq!(
            *outcome.lock().unwrap(),
            Some(Err(std::io::ErrorKind::TimedOut)),
            "cut {from} -> {to}"
        );
    }
}
