//! dlock: distributed locks as native Redis commands.
//!
//! The rules live in the `dlock-core` crate (`core/`: no Redis types,
//! unit-tested with `cargo test`); `server` maps the module API onto them.

#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing
    )
)]

mod server;
pub mod version;

use std::ffi::c_int;

use redis_module::raw;

/// Module memory is counted by the server (`used_memory`, `MEMORY USAGE`).
/// Unit tests run without a server, so they keep the system allocator, and so
/// do `system-alloc` builds (valgrind).
#[cfg(not(any(test, feature = "system-alloc")))]
#[global_allocator]
static ALLOCATOR: redis_module::alloc::RedisAlloc = redis_module::alloc::RedisAlloc;

/// Module entry point.
///
/// # Safety
/// Called by redis-server with a valid context and argument vector.
#[no_mangle]
pub unsafe extern "C" fn RedisModule_OnLoad(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    // Nothing may allocate before this: the allocator is the server's.
    let init = unsafe {
        raw::Export_RedisModule_Init(
            ctx,
            c"dlock".as_ptr(),
            version::MODULE_VERSION,
            raw::REDISMODULE_APIVER_1 as c_int,
        )
    };
    if init == raw::Status::Err as c_int {
        return server::edge::api::ERR;
    }
    #[cfg(feature = "leak-canary")]
    std::mem::forget(std::hint::black_box(vec![0u8; 4096]));
    server::edge::ffi::guard("load", server::edge::api::ERR, || {
        match server::load(server::edge::api::Ctx(ctx), argv, argc) {
            Ok(()) => server::edge::api::OK,
            Err(e) => {
                server::edge::api::log(ctx, c"warning", &format!("load failed: {e}"));
                server::edge::api::ERR
            }
        }
    })
}
