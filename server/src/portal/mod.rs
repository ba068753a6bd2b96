//! The portal's accounts and authorisation.

pub mod authz;
