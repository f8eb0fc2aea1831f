//! A test user of the test's own and the commands it runs as in a login
//! session of its own: tessera-experiments' session user (the desktop
//! scenario makes its user the same way), created or the test fails.

pub use tessera_experiments::harness::session_user::SessionUser as TestUser;

/// The test user `name`, created (and removed when dropped).
pub fn test_user(name: &str) -> TestUser {
    TestUser::create(name).expect("a test user")
}
