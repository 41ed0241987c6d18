//! Message digests: SHA-256 to check downloaded files (`k3 verify`, docs/verify.md), and
//! HMAC-SHA-256 to sign what the server hands out and takes back.

pub mod sha256;

/// HMAC-SHA-256 (RFC 2104, FIPS 198-1) of `msg` under `key`: a keyed hash, used to sign the
/// thinking text the server hands to clients (`POST /v1/messages`) so that it can recognise
/// it when it comes back.
pub fn hmac_sha256(key: &[u8], msg: &[u8]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut k = [0u8; BLOCK];
    if key.len() > BLOCK {
        k[..32].copy_from_slice(&sha256::Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let pad = |x: u8| k.map(|b| b ^ x);
    let mut inner = sha256::Sha256::new();
    inner.update(&pad(0x36));
    inner.update(msg);
    let mut outer = sha256::Sha256::new();
    outer.update(&pad(0x5c));
    outer.update(&inner.finish());
    outer.finish()
}

#[cfg(test)]
mod tests {
    /// RFC 4231 test cases 1, 2 and 6 (a key longer than the block).
    #[test]
    fn hmac_sha256_rfc4231() {
        let hex = |d: [u8; 32]| super::sha256::to_hex(&d);
        assert_eq!(
            hex(super::hmac_sha256(&[0x0b; 20], b"Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"
        );
        assert_eq!(
            hex(super::hmac_sha256(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert_eq!(
            hex(super::hmac_sha256(
                &[0xaa; 131],
                b"Test Using Larger Than Block-Size Key - Hash Key First"
            )),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }
}
