//! How a lock sits in the keyspace. A plain lock is one allocation holding
//! the token length, the fence and the token bytes, so a grant costs one
//! allocation and a release one free, and a held lock stays close to the
//! size of the `SET NX PX` string it replaces. Every other resource (shared
//! holds, a semaphore, an owner's several holds) is a boxed `Holds` behind
//! a tag no token length can take.
//!
//! The module value pointer points at the block itself; every function here
//! takes such a pointer (or null) and nothing else.

use std::alloc::{alloc, dealloc, Layout};
use std::ffi::c_void;

use dlock_core::resource::holds::Holds;
use dlock_core::resource::lease::LeaseRef;

/// Token length (u64), then fence (u64), then the token.
const HEADER: usize = 16;

/// The first word of a multi-hold block: far above any token length.
const MULTI_TAG: u64 = u64::MAX;

#[repr(C)]
struct MultiBlock {
    tag: u64,
    holds: Holds,
}

/// What a block holds.
#[derive(Debug, Clone, Copy)]
pub enum Stored<'a> {
    Plain(LeaseRef<'a>),
    Multi(&'a Holds),
}

impl Stored<'_> {
    /// The highest fence the value reveals to whoever reads it.
    pub fn max_fence(&self) -> u64 {
        match self {
            Stored::Plain(l) => l.fence(),
            Stored::Multi(h) => h.max_fence(),
        }
    }
}

fn layout(token_len: usize) -> Option<Layout> {
    Layout::from_size_align(HEADER.checked_add(token_len)?, 8).ok()
}

/// A new block for `lease`; null if it cannot be allocated.
pub fn into_raw(lease: LeaseRef<'_>) -> *mut c_void {
    let token = lease.token();
    let Some(layout) = layout(token.len()) else {
        return std::ptr::null_mut();
    };
    let block = unsafe { alloc(layout) };
    if block.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: the block is HEADER + len bytes, 8-aligned, freshly allocated.
    unsafe {
        block.cast::<u64>().write(token.len() as u64);
        block.cast::<u64>().add(1).write(lease.fence());
        std::ptr::copy_nonoverlapping(token.as_ptr(), block.add(HEADER), token.len());
    }
    block.cast::<c_void>()
}

/// A new block for `holds`: the plain layout when they are exactly a plain
/// lock (`Holds::as_plain`), else a multi-hold block.
pub fn holds_into_raw(holds: Holds) -> *mut c_void {
    if let Some(h) = holds.as_plain() {
        return into_raw(LeaseRef::new(h.token, h.fence));
    }
    Box::into_raw(Box::new(MultiBlock {
        tag: MULTI_TAG,
        holds,
    }))
    .cast::<c_void>()
}

/// The value stored in a block.
///
/// # Safety
/// `value` is null or a block from `into_raw`/`holds_into_raw` that
/// outlives `'a`.
pub unsafe fn view<'a>(value: *const c_void) -> Option<Stored<'a>> {
    if value.is_null() {
        return None;
    }
    let header = value.cast::<u64>();
    let first = header.read();
    if first == MULTI_TAG {
        return Some(Stored::Multi(&(*value.cast::<MultiBlock>()).holds));
    }
    let len = usize::try_from(first).ok()?;
    let fence = header.add(1).read();
    let token = std::slice::from_raw_parts(value.cast::<u8>().add(HEADER), len);
    Some(Stored::Plain(LeaseRef::new(token, fence)))
}

/// The holds of a multi-hold block, to change in place (the key's TTL and
/// the plain layout are the caller's business).
///
/// # Safety
/// As for `view`, and nothing else borrows the block for `'a`.
pub unsafe fn holds_mut<'a>(value: *mut c_void) -> Option<&'a mut Holds> {
    if value.is_null() || value.cast::<u64>().read() != MULTI_TAG {
        return None;
    }
    Some(&mut (*value.cast::<MultiBlock>()).holds)
}

/// Bytes the block occupies, for `MEMORY USAGE`.
///
/// # Safety
/// As for `view`.
pub unsafe fn size(value: *const c_void) -> usize {
    match view(value) {
        None => 0,
        Some(Stored::Plain(l)) => HEADER + l.token().len(),
        Some(Stored::Multi(h)) => std::mem::size_of::<MultiBlock>() + h.heap_bytes(),
    }
}

/// Frees a block.
///
/// # Safety
/// `value` is null or a block from `into_raw`/`holds_into_raw`, not used
/// afterwards.
pub unsafe fn free(value: *mut c_void) {
    match view(value) {
        None => {}
        Some(Stored::Multi(_)) => drop(Box::from_raw(value.cast::<MultiBlock>())),
        Some(Stored::Plain(l)) => {
            if let Some(layout) = layout(l.token().len()) {
                dealloc(value.cast::<u8>(), layout);
            }
        }
    }
}
