use super::*;

#[test]
fn ping_round_trips() {
    let m = Message::Ping { token: 7 };
    assert_eq!(decode(&encode(&m).unwrap()).unwrap(), m);
}
