//! The numbers in job ids: a store's sequence number permuted under the store's key, so
//! that ids stay unique and tell no one how many jobs others admitted. Owns the
//! permutation only; the store numbers jobs, keeps the key and writes the ids.

/// Rounds of the Feistel network (as many as NIST's FF1 uses).
const ROUNDS: u8 = 10;

/// `number`'s image under a keyed permutation of the integers below 2^`bits`: a
/// balanced Feistel network whose round function is BLAKE3 keyed with `key`, fed the
/// round, the half width and the right half (16 bytes, big-endian), its first 16
/// bytes read big-endian. A bijection whatever the round function. `None` when `bits`
/// is odd or above 64, or `number` does not fit in it.
pub fn permuted(number: u64, key: &[u8; 32], bits: u32) -> Option<u64> {
    if !bits.is_multiple_of(2) || bits > 64 || u128::from(number) >> bits != 0 {
        return None;
    }
    // In 128 bits, so that a half of 32 bits shifts and masks like any other.
    let half = bits / 2;
    let mask = (1u128 << half) - 1;
    let (mut left, mut right) = (u128::from(number) >> half, u128::from(number) & mask);
    let mut input = [0u8; 18];
    input[1] = half as u8;
    for round in 0..ROUNDS {
        input[0] = round;
        input[2..].copy_from_slice(&right.to_be_bytes());
        // The first 16 bytes of the output: a prefix of BLAKE3's output stream.
        let hash = blake3::keyed_hash(key, &input);
        let mut mixed = [0u8; 16];
        mixed.copy_from_slice(&hash.as_bytes()[..16]);
        (left, right) = (right, left ^ (u128::from_be_bytes(mixed) & mask));
    }
    u64::try_from((left << half) | right).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_permutation_of_its_range() {
        let key = [7u8; 32];
        let mut images: Vec<u64> = (0..1 << 12)
            .map(|n| permuted(n, &key, 12).unwrap())
            .collect();
        assert!(images.iter().all(|&i| i < 1 << 12));
        images.sort_unstable();
        images.dedup();
        assert_eq!(images.len(), 1 << 12);
    }

    #[test]
    fn another_key_another_permutation() {
        let a: Vec<u64> = (0..64)
            .map(|n| permuted(n, &[1u8; 32], 48).unwrap())
            .collect();
        let b: Vec<u64> = (0..64)
            .map(|n| permuted(n, &[2u8; 32], 48).unwrap())
            .collect();
        assert_ne!(a, b);
    }

    #[test]
    fn numbers_outside_the_range_have_no_image() {
        assert_eq!(permuted(1 << 48, &[0u8; 32], 48), None);
        assert_eq!(permuted(1, &[0u8; 32], 47), None);
        assert_eq!(permuted(1, &[0u8; 32], 66), None);
        assert!(permuted(u64::MAX, &[0u8; 32], 64).is_some());
    }
}
