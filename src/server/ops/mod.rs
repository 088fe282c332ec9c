//! What operators set and read: the module's configs, the `INFO dlock`
//! section, and the `dlock` ACL category.

pub mod acl;
pub mod config;
pub mod info;
