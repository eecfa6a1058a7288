//! The accept path every platform shares, once a request is verified and read: turn away a
//! delivery this process is accepting already, let an `approve` / `deny` answer the approvals a
//! session waits for, accept the message durably, and follow its turn to the reply it is owed.

use super::Ctx;
use super::error::ChannelError;
use super::session::{self, Accepted, Incoming, PlatformAnswer, Reply};

/// A verified message for the agent.
pub(super) struct Delivery<'a> {
    /// The conversation's session; `None` starts a new session.
    pub(crate) session: Option<&'a str>,
    /// The message.
    pub(crate) text: &'a str,
    /// The platform's id of the delivery: a delivery already accepted is not accepted again.
    pub(crate) id: Option<&'a str>,
    /// Whether this process also remembers `id` while accepting it, for platforms that retry a
    /// delivery quickly (the store decides either way).
    pub(crate) remember: bool,
    /// Who sent it (`slack:U123`); an approval answer is taken only from a named sender.
    pub(crate) sender: Option<&'a str>,
}

/// What became of a delivery.
pub(super) enum Outcome {
    /// This process is accepting (or accepted) the same delivery already.
    Seen,
    /// The store had accepted the delivery already (before a restart, or elsewhere).
    Repeated,
    /// The message answered the approvals its session waits for.
    Answered(PlatformAnswer),
    /// Accepted; its reply, if any, follows the turn in the background.
    Accepted(Accepted),
}

/// Accepts `delivery`, with the reply it is owed.
pub(super) async fn deliver(
    ctx: &Ctx<'_>,
    delivery: Delivery<'_>,
    reply: Option<Box<dyn Reply>>,
) -> Result<Outcome, ChannelError> {
    let seen = &ctx.channel.seen;
    let claimed = delivery.id.filter(|id| delivery.remember && !id.is_empty());
    if let Some(id) = claimed
        && !seen.claim(id)
    {
        return Ok(Outcome::Seen);
    }
    let outcome = accept(ctx, &delivery, reply).await;
    // Not accepted after all: a retry must be taken.
    if outcome.is_err()
        && let Some(id) = claimed
    {
        seen.release(id);
    }
    outcome
}

async fn accept(
    ctx: &Ctx<'_>,
    delivery: &Delivery<'_>,
    reply: Option<Box<dyn Reply>>,
) -> Result<Outcome, ChannelError> {
    let runtime = &ctx.app.runtime;
    if let (Some(session), Some(sender)) = (delivery.session, delivery.sender) {
        let caller = ctx.app.config.operators.platform(sender);
        if let Some(answered) =
            session::answer_approval(runtime, session, delivery.text, &caller).await?
        {
            return Ok(Outcome::Answered(answered));
        }
    }
    let incoming = Incoming {
        delivery: delivery.id,
        reply: reply.as_deref(),
        sender: delivery.sender,
    };
    let name = &ctx.channel.name;
    let accepted = session::accept(runtime, name, delivery.session, delivery.text, incoming);
    let Some(accepted) = accepted.await? else {
        return Ok(Outcome::Repeated);
    };
    if let Some(mut reply) = reply {
        reply.accepted_into(&accepted.session);
        session::spawn_reply(
            runtime.clone(),
            accepted.clone(),
            ctx.app.config.shutdown.clone(),
            reply,
            Vec::new(),
        );
    }
    Ok(Outcome::Accepted(accepted))
}
