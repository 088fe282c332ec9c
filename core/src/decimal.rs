//! A number as decimal text without allocating, for effect arguments.
//!
//! Handed to the server as a byte buffer, a number becomes one small string
//! object; handed over as an integer it costs two allocations (object and
//! string) on every write, for the same bytes in the AOF and on the wire.

/// `u64::MAX` has 20 digits.
const MAX_DIGITS: usize = 20;

pub struct Decimal {
    digits: [u8; MAX_DIGITS],
    start: usize,
}

impl Decimal {
    pub fn new(mut n: u64) -> Decimal {
        let mut digits = [b'0'; MAX_DIGITS];
        let mut start = MAX_DIGITS;
        while start > 0 {
            start -= 1;
            if let Some(d) = digits.get_mut(start) {
                *d = b'0' + (n % 10) as u8;
            }
            n /= 10;
            if n == 0 {
                break;
            }
        }
        Decimal { digits, start }
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.digits.get(self.start..).unwrap_or(&[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::args::parse_u64;

    #[test]
    fn same_text_as_display() {
        for n in [
            0,
            1,
            9,
            10,
            99,
            100,
            1_763_779_200_000,
            u64::MAX - 1,
            u64::MAX,
        ] {
            assert_eq!(Decimal::new(n).as_bytes(), n.to_string().as_bytes());
        }
    }

    #[test]
    fn parses_back() {
        let mut n = 1u64;
        while n < u64::MAX / 7 {
            assert_eq!(parse_u64(Decimal::new(n).as_bytes()), Some(n));
            n = n * 7 + 3;
        }
    }
}
