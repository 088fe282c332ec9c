//! Redis Cluster as this node sees it: whether it may grant a lock on a
//! resource (only if it serves the resource's slot stably), and its view
//! of the slots for the observers' checks (`observe`). Asked only where no
//! client's routed command decides (deferred handoffs, observers' checks),
//! and only in cluster mode, so plain servers and the hot path never pay
//! for it.

use crate::server::edge::api::{rm, Ctx};
use dlock_core::rules::cluster::{key_slot, slot_state, SlotState};
use dlock_core::Error;

pub fn may_grant(ctx: Ctx, key: &[u8]) -> Result<bool, Error> {
    if !ctx.flags()?.is_cluster() {
        return Ok(true);
    }
    let nodes = cluster_nodes(ctx)?;
    Ok(slot_state(&nodes, key_slot(key)) == SlotState::Stable)
}

/// `CLUSTER NODES` as this node sees it, in Redis Cluster; `None` outside
/// it.
pub fn view(ctx: Ctx) -> Result<Option<String>, Error> {
    if !ctx.flags()?.is_cluster() {
        return Ok(None);
    }
    cluster_nodes(ctx).map(Some)
}

fn cluster_nodes(ctx: Ctx) -> Result<String, Error> {
    let call = rm!(RedisModule_Call);
    let text = rm!(RedisModule_CallReplyStringPtr);
    let free = rm!(RedisModule_FreeCallReply);
    let reply = unsafe { call(ctx.0, c"CLUSTER".as_ptr(), c"c".as_ptr(), c"NODES".as_ptr()) };
    if reply.is_null() {
        return Err(Error::Internal("CLUSTER NODES failed"));
    }
    let mut len = 0usize;
    let ptr = unsafe { text(reply, &mut len) };
    let nodes = if ptr.is_null() {
        String::new()
    } else {
        String::from_utf8_lossy(unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) })
            .into_owned()
    };
    unsafe { free(reply) };
    Ok(nodes)
}
