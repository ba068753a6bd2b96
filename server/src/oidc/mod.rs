//! OpenID Connect, as a relying party: the protocol alone, apart from who
//! the person becomes in bizrq (`identity`) and the pages (`portal::oidc`).
//!
//! - [`jws`] (pure): a token's signature against the provider's key set;
//!   only RS256, PS256 and ES256.
//! - [`claims`] (pure): what a relying party must check of an ID token's
//!   claims, and who it names ([`claims::Person`]).
//! - [`flow`] (pure): the sign-in's secrets (state, browser binding, nonce,
//!   PKCE verifier) and the URLs of the authorization and end-session
//!   endpoints.
//! - [`http`]: bounded requests to the provider.
//! - [`provider`]: discovery, the key set with rotation, the token
//!   endpoint, userinfo.
//!
//! docs/oidc.md has the protocol as bizrq runs it, the flags and the
//! settings of Keycloak, Dex and Okta.

pub mod claims;
pub mod flow;
pub mod http;
pub mod jws;
pub mod provider;
