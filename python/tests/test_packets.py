import threading

import pytest

import cuframes

SPS_PPS = bytes.fromhex("00000001 6742c01e da02 80bf e5c0 4400 0003 0004 0000 0300 c83c 58ba 80")
PPS = bytes.fromhex("00000001 68ce3c80")


def test_packet_round_trip(runtime_dir, key):
    with cuframes.PacketPublisher(key, codec="h264") as pub:
        got, errors, ready = [], [], threading.Event()

        def read():
            try:
                with cuframes.PacketSubscriber(key) as sub:
                    got.append(("codec", sub.codec, sub.codec_id))
                    ready.set()
                    for p in sub:
                        got.append(p)
            except Exception as e:  # pragma: no cover
                errors.append(e)
                ready.set()

        t = threading.Thread(target=read)
        t.start()
        assert pub.wait_for_subscribers(1, timeout=5)
        assert ready.wait(5)
        payloads = [bytes([i]) * (100 + i) for i in range(10)]
        for i, data in enumerate(payloads):
            seq = pub.publish(data, pts_ns=i * 40, dts_ns=i * 40 - 1, keyframe=(i % 5 == 0))
            assert seq == i + 1
        pub.close()
        t.join(10)
    assert errors == []
    assert got[0] == ("codec", "h264", 27)
    packets = got[1:]
    assert [p.data for p in packets] == payloads
    assert [p.seq for p in packets] == list(range(1, 11))
    assert [p.pts_ns for p in packets] == [i * 40 for i in range(10)]
    assert [p.dts_ns for p in packets] == [i * 40 - 1 for i in range(10)]
    assert [p.keyframe for p in packets] == [i % 5 == 0 for i in range(10)]
    assert not any(p.discontinuity for p in packets)


def test_packet_extradata_and_timeout(runtime_dir, key):
    extradata = SPS_PPS + PPS
    with cuframes.PacketPublisher(key, codec="hevc", extradata=b"") as pub:
        pub.set_extradata(extradata)
        with cuframes.PacketSubscriber(key) as sub:
            assert sub.codec == "hevc"
            assert sub.extradata == extradata
            assert sub.next(timeout=0.05) is None
            pub.publish(b"\x00\x00\x01\x26abc", keyframe=True)
            p = sub.next(timeout=5)
            assert p.pts_ns is None and p.dts_ns is None and p.keyframe
            assert len(p) == 7


def test_packet_bad_inputs(runtime_dir, key):
    with pytest.raises(ValueError):
        cuframes.PacketPublisher(key, codec="mpeg2")
    with pytest.raises(cuframes.Error) as e:
        cuframes.PacketSubscriber(key, handshake_timeout=0.2)
    assert e.value.name == "CUFRAMES_ERR_NOT_FOUND"
    with cuframes.PacketPublisher(key, codec="av1") as pub:
        with pytest.raises(TypeError):
            pub.publish(12345)
        # A frame subscriber on a packet-only publisher: refused with a cuframes error.
        with pytest.raises(cuframes.Error):
            cuframes.Subscriber(key, handshake_timeout=1)
