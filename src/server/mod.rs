//! Everything that touches the Redis module API. The rules live in `lock`;
//! this layer maps commands, replies, persistence and replication onto them.

pub mod commands;
pub mod edge;
pub mod events;
pub mod execute;
pub mod guarded;
pub mod jobs;
pub mod keyspace;
pub mod notify;
pub mod ops;
pub mod persistence;
pub mod quarantine;
pub mod resource;
pub mod sessions;
pub mod state;
pub mod waiting;

use std::ffi::c_int;

use redis_module::raw;

use dlock_core::Error;
use edge::api::{rm, Ctx};
use edge::ffi::{command_entry, register, register_container};

command_entry!(acquire_entry => commands::lock::acquire);
command_entry!(release_entry => commands::lock::release);
command_entry!(extend_entry => commands::lock::extend);
command_entry!(info_entry => commands::info::info);
command_entry!(observe_entry => commands::observe::observe);
command_entry!(queued_entry => commands::queued::queued);
command_entry!(stats_entry => commands::stats::stats);
command_entry!(position_entry => commands::position::position);
command_entry!(waiters_entry => commands::position::waiters);
command_entry!(macquire_entry => commands::sets::macquire);
command_entry!(mrelease_entry => commands::sets::mrelease);
command_entry!(mextend_entry => commands::sets::mextend);
command_entry!(apply_entry => persistence::effects::apply);
command_entry!(meta_entry => persistence::effects::meta);
command_entry!(add_hold_entry => persistence::hold_effects::apply_add);
command_entry!(move_hold_entry => persistence::hold_effects::apply_move);
command_entry!(drop_hold_entry => persistence::hold_effects::apply_drop);
command_entry!(set_limit_entry => persistence::hold_effects::apply_set_limit);
command_entry!(resize_entry => commands::lock::resize);
command_entry!(set_holds_entry => persistence::hold_effects::apply_set);
command_entry!(session_open_entry => commands::session::open);
command_entry!(session_keep_alive_entry => commands::session::keep_alive);
command_entry!(session_close_entry => commands::session::close);
command_entry!(session_kill_entry => commands::session::kill);
command_entry!(session_info_entry => commands::session::info);
command_entry!(session_list_entry => commands::session::list);
command_entry!(session_holds_entry => commands::session::holds);
command_entry!(session_help_entry => commands::session::help);
command_entry!(session_waits_entry => commands::session::waits);
command_entry!(session_set_entry => persistence::session_effects::apply_set);
command_entry!(session_end_entry => persistence::session_effects::apply_end);
command_entry!(whole guard_entry => commands::guard::guard);
command_entry!(check_entry => commands::guard::check);

/// Everything `RedisModule_OnLoad` does once the API is initialised.
pub fn load(ctx: Ctx, argv: *mut *mut raw::RedisModuleString, argc: c_int) -> Result<(), Error> {
    // Short reads must reach our loader instead of aborting the server, and
    // only real changes may touch other clients' WATCH.
    let options = raw::REDISMODULE_OPTIONS_HANDLE_IO_ERRORS
        | raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED;
    unsafe { rm!(RedisModule_SetModuleOptions)(ctx.0, options as c_int) };

    state::set_replica(ctx.flags()?.is_replica());
    let args = module_args(argv, argc)?;
    ops::config::register(ctx, &args)?;
    persistence::data_type::register_type(ctx)?;
    events::job_runner::init(ctx)?;
    edge::clients::init(ctx)?;
    edge::clients::on_disconnect(sessions::connection_closed);
    events::server::subscribe(ctx)?;
    events::notifications::subscribe(ctx)?;
    quarantine::init(ctx)?;

    register(
        ctx,
        c"dlock.acquire",
        Some(acquire_entry),
        c"write deny-oom",
        true,
    )?;
    register(ctx, c"dlock.release", Some(release_entry), c"write", true)?;
    // Grows or shrinks a held semaphore; growing grants waiters.
    register(
        ctx,
        c"dlock.resize",
        Some(resize_entry),
        c"write deny-oom",
        true,
    )?;
    // Not deny-oom: a holder must keep its lease at maxmemory, as PEXPIRE can.
    register(
        ctx,
        c"dlock.extend",
        Some(extend_entry),
        c"write fast",
        true,
    )?;
    register(ctx, c"dlock.info", Some(info_entry), c"readonly fast", true)?;
    // Its keys are the resource and every inner command's (`getkeys-api`);
    // not deny-oom: its inner commands are refused at maxmemory as each
    // would be, so a guarded DEL still frees memory.
    register(
        ctx,
        c"dlock.guard",
        Some(guard_entry),
        c"write getkeys-api",
        true,
    )?;
    register(
        ctx,
        c"dlock.check",
        Some(check_entry),
        c"readonly fast",
        true,
    )?;
    register(
        ctx,
        c"dlock.observe",
        Some(observe_entry),
        c"readonly blocking",
        true,
    )?;
    // No key: it lists names from the parking lot, like `PUBSUB CHANNELS`.
    register(ctx, c"dlock.queued", Some(queued_entry), c"readonly", false)?;
    // No key; RESET changes no data, as CONFIG RESETSTAT.
    register(ctx, c"dlock.stats", Some(stats_entry), c"readonly", false)?;
    // Read the queue as DLOCK.INFO reads the resource (a handoff that is
    // due first).
    register(
        ctx,
        c"dlock.position",
        Some(position_entry),
        c"readonly fast",
        true,
    )?;
    register(
        ctx,
        c"dlock.waiters",
        Some(waiters_entry),
        c"readonly",
        true,
    )?;
    // Their keys (`numkeys` resources) are declared by a key spec set in
    // `commands::docs::describe` (COMMAND GETKEYS, ACL) and answered to the server's
    // key requests (`getkeys-api`: cluster routing); without the key-spec
    // API (Redis 6) they are not offered.
    if unsafe { raw::RedisModule_SetCommandInfo }.is_some() {
        register(
            ctx,
            c"dlock.macquire",
            Some(macquire_entry),
            c"write deny-oom getkeys-api",
            false,
        )?;
        register(
            ctx,
            c"dlock.mrelease",
            Some(mrelease_entry),
            c"write getkeys-api",
            false,
        )?;
        register(
            ctx,
            c"dlock.mextend",
            Some(mextend_entry),
            c"write getkeys-api",
            false,
        )?;
    }
    register(
        ctx,
        persistence::effects::APPLY,
        Some(apply_entry),
        c"write deny-script",
        true,
    )?;
    // The effects of resources that are not plain locks.
    register(
        ctx,
        persistence::hold_effects::ADDHOLD,
        Some(add_hold_entry),
        c"write deny-script",
        true,
    )?;
    register(
        ctx,
        persistence::hold_effects::MOVEHOLD,
        Some(move_hold_entry),
        c"write deny-script",
        true,
    )?;
    register(
        ctx,
        persistence::hold_effects::DROPHOLD,
        Some(drop_hold_entry),
        c"write deny-script",
        true,
    )?;
    register(
        ctx,
        persistence::hold_effects::SETLIMIT,
        Some(set_limit_entry),
        c"write deny-script",
        true,
    )?;
    register(
        ctx,
        persistence::hold_effects::SETHOLDS,
        Some(set_holds_entry),
        c"write deny-script",
        true,
    )?;
    register(
        ctx,
        persistence::effects::META,
        Some(meta_entry),
        c"write deny-script",
        false,
    )?;
    register_container(
        ctx,
        c"dlock.session",
        &[
            (c"open", Some(session_open_entry), c"write deny-oom fast"),
            (c"keepalive", Some(session_keep_alive_entry), c"write fast"),
            (c"close", Some(session_close_entry), c"write fast"),
            (c"kill", Some(session_kill_entry), c"write fast"),
            (c"info", Some(session_info_entry), c"readonly fast"),
            (c"list", Some(session_list_entry), c"readonly"),
            (c"holds", Some(session_holds_entry), c"readonly"),
            (c"waits", Some(session_waits_entry), c"readonly"),
            (c"help", Some(session_help_entry), c"readonly fast"),
        ],
    )?;
    register(
        ctx,
        persistence::session_effects::SESSIONSET,
        Some(session_set_entry),
        c"write deny-script",
        false,
    )?;
    register(
        ctx,
        persistence::session_effects::SESSIONEND,
        Some(session_end_entry),
        c"write deny-script",
        false,
    )?;
    commands::docs::describe(ctx)?;
    ops::acl::register(ctx)?;
    ops::info::register(ctx)
}

fn module_args<'a>(
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> Result<Vec<&'a [u8]>, Error> {
    let n = usize::try_from(argc).unwrap_or(0);
    if argv.is_null() || n == 0 {
        return Ok(Vec::new());
    }
    unsafe { std::slice::from_raw_parts(argv, n) }
        .iter()
        .map(|s| edge::api::bytes(*s))
        .collect()
}
