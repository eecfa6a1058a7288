//! `LISTEN/NOTIFY`: how a node hears that another node committed.
//!
//! Every commit of a [`super::PgStore`] sends `pg_notify(<channel>, <instance id>)` inside its
//! transaction, so the notification is delivered exactly when (and only if) the commit is. One
//! connection per store instance, outside the pool, listens on the channel and bumps the store's
//! foreign-commit counter for every notification that is not its own; the engine's followers and
//! its work watcher wake on that counter (new events to stream, an accepted message, an approval
//! answer, a schedule fire). A lost connection is re-opened with a short pause, and the counter is
//! bumped once on reconnecting, since notifications sent meanwhile are gone (the watcher's polling
//! fallback covers the rest).

use std::time::Duration;

use futures::StreamExt;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_postgres::{AsyncMessage, NoTls};

/// Pause before re-opening a lost listening connection.
const RECONNECT: Duration = Duration::from_millis(500);

/// Listens on `channel` until the returned task is aborted; signals `ready` once `LISTEN` ran.
pub(super) fn spawn(
    config: tokio_postgres::Config,
    channel: String,
    instance: String,
    foreign: watch::Sender<u64>,
    ready: oneshot::Sender<Result<(), String>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut ready = Some(ready);
        loop {
            match config.connect(NoTls).await {
                Ok((client, mut connection)) => {
                    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
                    let driver = tokio::spawn(async move {
                        let mut messages =
                            futures::stream::poll_fn(move |cx| connection.poll_message(cx));
                        while let Some(message) = messages.next().await {
                            match message {
                                Ok(AsyncMessage::Notification(n)) => {
                                    if tx.send(n.payload().to_owned()).is_err() {
                                        break;
                                    }
                                }
                                Ok(_) => {}
                                Err(e) => {
                                    tracing::warn!(error = %e, "the store's listening connection failed");
                                    break;
                                }
                            }
                        }
                    });
                    let listen = client.batch_execute(&format!("LISTEN \"{channel}\"")).await;
                    match listen {
                        Ok(()) => {
                            if let Some(r) = ready.take() {
                                let _ = r.send(Ok(()));
                            } else {
                                foreign.send_modify(|n| *n = n.wrapping_add(1));
                            }
                            while let Some(payload) = rx.recv().await {
                                if payload != instance {
                                    foreign.send_modify(|n| *n = n.wrapping_add(1));
                                }
                            }
                        }
                        Err(e) => {
                            if let Some(r) = ready.take() {
                                let _ = r.send(Err(e.to_string()));
                                driver.abort();
                                return;
                            }
                        }
                    }
                    driver.abort();
                    drop(client);
                }
                Err(e) => {
                    if let Some(r) = ready.take() {
                        let _ = r.send(Err(e.to_string()));
                        return;
                    }
                    tracing::warn!(error = %e, "cannot re-open the store's listening connection");
                }
            }
            tokio::time::sleep(RECONNECT).await;
        }
    })
}
