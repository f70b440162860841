//! Property tests of the protocol codec: arbitrary bytes never panic the decoder, and every
//! message the encoder writes decodes to what was written.

use proptest::prelude::*;
use rodeo_transport::message::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256), id in 0usize..9) {
        // Half the time give it a valid type id so the payload parsers are exercised.
        let mut b = bytes;
        if b.len() >= 12 && id % 2 == 0 {
            b[0..4].copy_from_slice(&MessageType::ALL[id].id().to_le_bytes());
            let len = (b.len() - 12) as u32;
            b[8..12].copy_from_slice(&len.to_le_bytes());
        }
        let _ = decode(&b);
    }

    #[test]
    fn data_request_round_trip(txn: u32, l1id: u32, robs in proptest::collection::vec(any::<u32>(), 0..64)) {
        let mut buf = Vec::new();
        encode_data_request(&mut buf, txn, l1id, &robs);
        let d = decode(&buf).unwrap();
        prop_assert_eq!(d.header.transaction, txn);
        match d.message {
            Message::DataRequest { l1id: got, robs: list } => {
                prop_assert_eq!(got, l1id);
                prop_assert_eq!(list.iter().collect::<Vec<_>>(), robs);
            }
            other => prop_assert!(false, "decoded as {:?}", other),
        }
    }

    #[test]
    fn data_reply_round_trip(sizes in proptest::collection::vec(2u32..40, 0..16)) {
        let frags: Vec<Vec<u32>> = sizes.iter().map(|&s| {
            let mut v = vec![0xDD12_34DD, s];
            v.resize(s as usize, s);
            v
        }).collect();
        let refs: Vec<&[u32]> = frags.iter().map(Vec::as_slice).collect();
        let mut buf = Vec::new();
        encode_data_reply(&mut buf, 1, 2, &refs);
        match decode(&buf).unwrap().message {
            Message::DataReply { fragments, .. } => {
                prop_assert_eq!(fragments.len(), frags.len());
                for (got, want) in fragments.iter().zip(&frags) {
                    prop_assert_eq!(got.len(), want.len() * 4);
                }
            }
            other => prop_assert!(false, "decoded as {:?}", other),
        }
    }
}
