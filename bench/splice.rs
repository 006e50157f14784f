//! The floor for any proxy: a plain byte splice (tokio `copy_bidirectional`), one upstream
//! connection per client. Used by bench/passthrough.sh.
//!
//! usage: splice LISTEN_ADDR UPSTREAM_ADDR

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let (listen, upstream) = match (args.next(), args.next()) {
        (Some(l), Some(u)) => (l, u),
        _ => {
            eprintln!("usage: splice LISTEN_ADDR UPSTREAM_ADDR");
            std::process::exit(2);
        }
    };
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    loop {
        let (mut client, _) = listener.accept().await?;
        let upstream = upstream.clone();
        tokio::spawn(async move {
            let _ = client.set_nodelay(true);
            if let Ok(mut up) = tokio::net::TcpStream::connect(&upstream).await {
                let _ = up.set_nodelay(true);
                let _ = tokio::io::copy_bidirectional(&mut client, &mut up).await;
            }
        });
    }
}
