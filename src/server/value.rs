//! How a lock sits in the keyspace: one allocation per lock holding the
//! token length, the fence and the token bytes, so a grant costs one
//! allocation and a release one free, and a held lock stays close to the
//! size of the `SET NX PX` string it replaces.
//!
//! The module value pointer points at the block itself; every function here
//! takes such a pointer (or null) and nothing else.

use std::alloc::{alloc, dealloc, Layout};
use std::ffi::c_void;

use crate::lock::lease::LeaseRef;

/// Token length (u64), then fence (u64), then the token.
const HEADER: usize = 16;

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

/// The lease stored in a block.
///
/// # Safety
/// `value` is null or a block from `into_raw` that outlives `'a`.
pub unsafe fn view<'a>(value: *const c_void) -> Option<LeaseRef<'a>> {
    if value.is_null() {
        return None;
    }
    let header = value.cast::<u64>();
    let len = usize::try_from(header.read()).ok()?;
    let fence = header.add(1).read();
    let token = std::slice::from_raw_parts(value.cast::<u8>().add(HEADER), len);
    Some(LeaseRef::new(token, fence))
}

/// Bytes the block occupies, for `MEMORY USAGE`.
///
/// # Safety
/// As for `view`.
pub unsafe fn size(value: *const c_void) -> usize {
    view(value).map_or(0, |l| HEADER + l.token().len())
}

/// Frees a block.
///
/// # Safety
/// `value` is null or a block from `into_raw`, not used afterwards.
pub unsafe fn free(value: *mut c_void) {
    let Some(len) = view(value).map(|l| l.token().len()) else {
        return;
    };
    if let Some(layout) = layout(len) {
        dealloc(value.cast::<u8>(), layout);
    }
}
