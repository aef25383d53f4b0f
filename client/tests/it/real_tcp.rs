//! The client over real TCP (`env::real`): a one-connection server task answers a login
//! and a ping, proving the client works on the production seam, not only the fake one.

use crate::support;

use cairn_client::{Client, ClientConfig};
use iggy_binary_protocol::{Operation, RequestHeader};
use support::{block_on, login_ok, reply};

/// Reads one request frame from `stream`.
async fn read_frame(
    stream: &mut Box<dyn cairn_engine::env::ByteStream>,
) -> Option<(RequestHeader, Vec<u8>)> {
    let mut frame = vec![0u8; 256];
    let mut filled = 0;
    while filled < frame.len() {
        let n = stream.read(&mut frame[filled..]).await.ok()?;
        if n == 0 {
            return None;
        }
        filled += n;
        if filled == 256 {
            let size = u32::from_le_bytes(frame[48..52].try_into().unwrap()) as usize;
            frame.resize(size, 0);
        }
    }
    let header: RequestHeader = bytemuck::checked::try_pod_read_unaligned(&frame[..256]).unwrap();
    Some((header, frame[256..].to_vec()))
}

#[test]
fn logs_in_and_pings_over_real_tcp() {
    let env = cairn_engine::env::real::env().unwrap();
    let mut listener = block_on(env.net.listen("127.0.0.1:0".parse().unwrap())).unwrap();
    let address = listener.local_addr().unwrap();
    let (done, finished) = cairn_engine::env::chan::oneshot::<Vec<u8>>();
    env.tasks.spawn(Box::pin(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut operations = Vec::new();
        while let Some((header, _body)) = read_frame(&mut stream).await {
            operations.push(header.operation as u8);
            let body = match header.operation {
                Operation::Register => login_ok(),
                _ => Vec::new(),
            };
            stream
                .write_all(&reply(&header, header.operation, 0, &body))
                .await
                .unwrap();
        }
        done.send(operations);
    }));
    let config = ClientConfig::new(address).with_credentials("iggy", "iggy");
    block_on(async {
        let mut client = Client::connect(env.clone(), config).await.unwrap();
        client.ping().await.unwrap();
        client.close().await; // logs out, then shuts the socket
        let operations = finished.await.unwrap();
        assert_eq!(operations, [1, 2, 3], "register, ping, logout");
    });
}
