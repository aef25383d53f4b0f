//! The simulated network under the deterministic executor: in-order exactly-once delivery
//! under delays and spikes, partitions, resets, and determinism.

use cairn_engine::env::{ByteStream, Net, Tasks};
use cairn_faults::{NetEvent, NetFaults, SimClock, SimNet};
use cairn_sim::executor::{Executor, Stop};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};

const SERVER: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
const CLIENT: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));

fn addr() -> SocketAddr {
    SocketAddr::new(SERVER, 9000)
}

async fn read_exact(stream: &mut Box<dyn ByteStream>, mut buf: &mut [u8]) -> std::io::Result<()> {
    while !buf.is_empty() {
        let n = stream.read(buf).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf = &mut buf[n..];
    }
    Ok(())
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
                read_exact(&mut stream, &mut back).await?;
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
