/* The C API end to end on host memory, the way a C program (FFmpeg) uses it: a publisher
 * and a subscriber in one process, frames published from host planes and read back byte
 * for byte, errors reported with a code and a message. Exit status 0 = pass. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuframes.h>

#define CHECK(cond, ...)                                                                        \
    do {                                                                                        \
        if (!(cond)) {                                                                          \
            fprintf(stderr, "api_smoke: %s:%d: ", __FILE__, __LINE__);                          \
            fprintf(stderr, __VA_ARGS__);                                                       \
            fprintf(stderr, " (last error: %s)\n", cuframes_last_error());                     \
            return 1;                                                                           \
        }                                                                                       \
    } while (0)

int main(void) {
    char dir[] = "/tmp/cuframes-api-smoke-XXXXXX";
    char key[64];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(key, sizeof key, "api-smoke-%d", (int)getpid());

    cuframes_publisher_options_t po;
    cuframes_publisher_options_default(&po);
    po.runtime_dir = dir;
    cuframes_publisher_t *pub = NULL;
    CHECK(cuframes_publisher_create(key, &po, &pub) == CUFRAMES_OK, "create");
    cuframes_publisher_t *again = NULL;
    CHECK(cuframes_publisher_create(key, &po, &again) == CUFRAMES_ERR_ALREADY_EXISTS, "second create");
    CHECK(strstr(cuframes_last_error(), "already") != NULL, "message names the cause");
    cuframes_publisher_t *shared = NULL;
    CHECK(cuframes_publisher_open_shared(key, &po, &shared) == CUFRAMES_OK, "open_shared");

    cuframes_frame_ring_config_t cfg;
    cuframes_frame_ring_config_default(&cfg);
    cfg.format = CUFRAMES_FORMAT_YUV420P;
    cfg.width = 70;
    cfg.height = 33;
    cfg.policy = CUFRAMES_POLICY_STRICT_WAIT;
    CHECK(cuframes_publisher_enable_frames(pub, &cfg) == CUFRAMES_OK, "enable_frames");
    cuframes_frame_layout_t lay;
    CHECK(cuframes_publisher_frame_layout(shared, &lay) == CUFRAMES_OK, "layout via shared handle");
    CHECK(lay.plane_count == 3 && lay.row_bytes[1] == 35 && lay.rows[1] == 17, "yuv420p layout");

    cuframes_subscriber_options_t so;
    cuframes_subscriber_options_default(&so);
    so.runtime_dir = dir;
    so.name = "api-smoke";
    cuframes_subscriber_t *sub = NULL;
    CHECK(cuframes_subscriber_connect(key, &so, &sub) == CUFRAMES_OK, "connect");
    CHECK(cuframes_publisher_subscriber_count(pub) == 1, "one subscriber");
    CHECK(cuframes_subscriber_memory_kind(sub) == (int)CUFRAMES_MEMORY_HOST_MEMFD, "host ring");

    uint8_t *planes[3];
    size_t strides[3];
    for (uint32_t i = 0; i < 3; i++) {
        strides[i] = lay.row_bytes[i] + 5; /* a stride unlike the ring's pitch */
        planes[i] = malloc(strides[i] * lay.rows[i]);
        for (size_t b = 0; b < strides[i] * lay.rows[i]; b++)
            planes[i][b] = (uint8_t)(b * 7 + i);
    }
    for (int n = 0; n < 3; n++) {
        CHECK(cuframes_publisher_publish_host(pub, (const uint8_t *const *)planes, strides, 3,
                                              1000 + n) == CUFRAMES_OK, "publish_host");
        cuframes_frame_t *f = NULL;
        CHECK(cuframes_subscriber_next_frame(sub, 2000, &f) == CUFRAMES_OK, "next_frame");
        cuframes_frame_info_t info;
        CHECK(cuframes_frame_info(f, &info) == CUFRAMES_OK, "frame_info");
        CHECK(info.seq == (uint64_t)n + 1 && info.pts_ns == 1000 + n, "seq %" PRIu64, info.seq);
        for (uint32_t i = 0; i < 3; i++) {
            const uint8_t *p = (const uint8_t *)(uintptr_t)info.data[i];
            for (uint32_t r = 0; r < lay.rows[i]; r++)
                CHECK(memcmp(p + (size_t)r * info.pitch[i], planes[i] + r * strides[i], lay.row_bytes[i]) == 0,
                      "plane %u row %u differs", i, r);
        }
        cuframes_frame_release(f, NULL);
    }
    cuframes_frame_t *none = NULL;
    CHECK(cuframes_subscriber_next_frame(sub, 20, &none) == CUFRAMES_ERR_TIMEOUT, "timeout");
    cuframes_frame_stats_t st;
    CHECK(cuframes_subscriber_stats(sub, &st) == CUFRAMES_OK && st.delivered == 3, "stats");
    cuframes_subscriber_info_t infos[4];
    CHECK(cuframes_publisher_subscribers(pub, infos, 4) == 1 && strcmp(infos[0].name, "api-smoke") == 0, "infos");

    /* Packets through the same publisher (§10): frames and packets side by side. */
    static const uint8_t sps[] = {0, 0, 0, 1, 0x67, 0x42};
    cuframes_packet_ring_config_t pc;
    cuframes_packet_ring_config_default(&pc);
    pc.codec_id = 27; /* AV_CODEC_ID_H264 */
    pc.ring_slots = 8;
    pc.data_size = 4096;
    pc.extradata = sps;
    pc.extradata_size = sizeof sps;
    CHECK(cuframes_publisher_enable_packets(pub, &pc) == CUFRAMES_OK, "enable_packets");
    uint8_t pkt[100];
    memset(pkt, 0xAB, sizeof pkt);
    uint64_t pseq = 0;
    CHECK(cuframes_publisher_publish_packet(pub, pkt, sizeof pkt, 40, 20, CUFRAMES_PACKET_FLAG_KEY, &pseq) == CUFRAMES_OK &&
              pseq == 1, "publish_packet");
    uint8_t big[5000] = {0};
    CHECK(cuframes_publisher_publish_packet(pub, big, sizeof big, 0, 0, 0, NULL) == CUFRAMES_ERR_INVALID_ARG,
          "oversized packet refused");
    cuframes_subscriber_options_t po2 = so;
    po2.flags = CUFRAMES_SUBSCRIBE_WANTS_PACKETS;
    cuframes_subscriber_t *psub = NULL;
    CHECK(cuframes_subscriber_connect(key, &po2, &psub) == CUFRAMES_OK, "packet subscriber");
    uint32_t codec = 0;
    CHECK(cuframes_subscriber_packet_codec(psub, &codec) == CUFRAMES_OK && codec == 27, "codec");
    size_t esz = 0;
    uint8_t ebuf[16];
    CHECK(cuframes_subscriber_packet_extradata(psub, NULL, 0, &esz) == CUFRAMES_OK && esz == sizeof sps, "extradata size");
    CHECK(cuframes_subscriber_packet_extradata(psub, ebuf, 2, &esz) == CUFRAMES_ERR_NO_MEMORY, "small buffer");
    CHECK(cuframes_subscriber_packet_extradata(psub, ebuf, sizeof ebuf, &esz) == CUFRAMES_OK &&
              memcmp(ebuf, sps, sizeof sps) == 0, "extradata");
    const uint8_t *pdata = NULL;
    cuframes_packet_info_t pinfo;
    CHECK(cuframes_subscriber_next_packet(psub, 1000, &pdata, &pinfo) == CUFRAMES_OK, "next_packet");
    CHECK(pinfo.seq == 1 && pinfo.size == sizeof pkt && pinfo.pts_ns == 40 && pinfo.dts_ns == 20 &&
              (pinfo.flags & CUFRAMES_PACKET_FLAG_KEY) && memcmp(pdata, pkt, sizeof pkt) == 0, "packet contents");
    CHECK(cuframes_subscriber_next_packet(psub, 10, &pdata, &pinfo) == CUFRAMES_ERR_TIMEOUT, "packet timeout");
    cuframes_subscriber_destroy(psub);

    /* Bad input gets an error code and a message, never a crash. */
    CHECK(cuframes_publisher_create("bad key!", &po, &again) == CUFRAMES_ERR_INVALID_ARG, "bad key");
    CHECK(cuframes_subscriber_connect(NULL, &so, &sub) == CUFRAMES_ERR_INVALID_ARG, "NULL key");
    CHECK(cuframes_publisher_enable_frames(NULL, &cfg) == CUFRAMES_ERR_INVALID_ARG, "NULL publisher");

    cuframes_publisher_destroy(shared); /* not the last handle: still serving */
    CHECK(cuframes_publisher_publish_host(pub, (const uint8_t *const *)planes, strides, 3, INT64_MIN) == CUFRAMES_OK,
          "publish after destroying the shared handle");
    cuframes_publisher_destroy(pub);
    cuframes_frame_t *f = NULL;
    int rc;
    while ((rc = cuframes_subscriber_next_frame(sub, 2000, &f)) == CUFRAMES_OK)
        cuframes_frame_release(f, NULL);
    CHECK(rc == CUFRAMES_ERR_DISCONNECTED, "disconnected after destroy, got %d", rc);
    cuframes_subscriber_destroy(sub);
    for (int i = 0; i < 3; i++)
        free(planes[i]);
    rmdir(dir);
    printf("api_smoke: C API publish/subscribe round trip OK\n");
    return 0;
}
