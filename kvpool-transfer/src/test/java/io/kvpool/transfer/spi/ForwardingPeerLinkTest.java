package io.kvpool.transfer.spi;

import org.junit.jupiter.api.Test;

import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.lang.reflect.Proxy;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import static org.junit.jupiter.api.Assertions.*;

/** The forwarding link: every call goes down, every event comes up naming the wrapper, frames through one method. */
class ForwardingPeerLinkTest {

    /** A link underneath that records the calls it gets, and whose poll reports one event of each kind. */
    static final class Underneath {
        final List<String> calls = new ArrayList<>();
        final PeerLink link = (PeerLink) Proxy.newProxyInstance(PeerLink.class.getClassLoader(), new Class<?>[] {PeerLink.class},
            (proxy, m, args) -> {
                calls.add(m.getName() + (args == null ? "()" : Arrays.stream(args).map(a -> a == null ? "null"
                    : a.getClass().getSimpleName()).toList().toString()));
                if (m.getName().equals("poll")) {
                    final LinkListener l = (LinkListener) args[0];
                    final PeerLink self = (PeerLink) proxy;
                    l.onFrame(self, ByteBuffer.wrap(new byte[] {1}));
                    l.onWriteDone(self, 7, PeerLink.OK);
                    l.onWritesDone(self, 8, 3, PeerLink.FAILED);
                    l.onFlushDone(self, 11, true);
                    l.onLinkFailed(self, "gone");
                    return 5;
                }
                final Class<?> r = m.getReturnType();
                return r == boolean.class ? Boolean.TRUE : r == int.class ? 0 : r == String.class ? "under" : null;
            });
    }

    /** Records every event it gets, with the link it names. */
    static final class Events implements LinkListener {
        final List<String> seen = new ArrayList<>();
        final List<PeerLink> links = new ArrayList<>();

        @Override
        public void onFrame(PeerLink link, ByteBuffer frame) {
            links.add(link);
            seen.add("frame");
        }

        @Override
        public void onWriteDone(PeerLink link, long token, int status) {
            links.add(link);
            seen.add("write " + token + " " + status);
        }

        @Override
        public void onWritesDone(PeerLink link, long firstToken, int count, int status) {
            links.add(link);
            seen.add("writes " + firstToken + "+" + count + " " + status);
        }

        @Override
        public void onFlushDone(PeerLink link, long token, boolean ok) {
            links.add(link);
            seen.add("flush " + token + " " + ok);
        }

        @Override
        public void onLinkFailed(PeerLink link, String reason) {
            links.add(link);
            seen.add("failed " + reason);
        }
    }

    @Test
    void everyEventNamesTheWrapperAndARunStaysOneRun() {
        final Underneath u = new Underneath();
        final ForwardingPeerLink wrapper = new ForwardingPeerLink(u.link) {
        };
        final Events e = new Events();
        assertEquals(5, wrapper.poll(e, 16));
        assertEquals(List.of("frame", "write 7 0", "writes 8+3 " + PeerLink.FAILED, "flush 11 true", "failed gone"), e.seen);
        assertTrue(e.links.stream().allMatch(l -> l == wrapper), "the engine knows its peer by this link: " + e.links);
    }

    @Test
    void everyCallOfTheContractGoesDown() throws Exception {
        final Underneath u = new Underneath();
        final ForwardingPeerLink wrapper = new ForwardingPeerLink(u.link) {
        };
        for (Method m : PeerLink.class.getMethods()) {
            if (Modifier.isStatic(m.getModifiers()) || m.getName().equals("poll")) {
                continue;
            }
            final Object[] args = Arrays.stream(m.getParameterTypes()).map(ForwardingPeerLinkTest::argument).toArray();
            u.calls.clear();
            m.invoke(wrapper, args);
            assertEquals(1, u.calls.size(), () -> m + " made " + u.calls);
            assertTrue(u.calls.get(0).startsWith(m.getName()), () -> m + " went down as " + u.calls);
        }
    }

    @Test
    void aFrameSentAsABufferReachesAnOverriddenSendOfArrays() {
        final Underneath u = new Underneath();
        final List<byte[]> watched = new ArrayList<>();
        final ForwardingPeerLink wrapper = new ForwardingPeerLink(u.link) {
            @Override
            public void send(byte[] frame) {
                watched.add(frame);
                super.send(frame);
            }
        };
        final ByteBuffer frame = ByteBuffer.wrap(new byte[] {9, 1, 2, 3, 9}, 1, 3);
        wrapper.send(frame);
        assertEquals(1, watched.size(), "a subclass that watches frames sees those sent as buffers too");
        assertArrayEquals(new byte[] {1, 2, 3}, watched.get(0));
        assertEquals(1, frame.position(), "the buffer's position is left as it was");
        assertEquals(List.of("send[byte[]]"), u.calls);
    }

    @Test
    void aHookThatPollsAgainLeavesTheOuterPollItsListener() {
        final Underneath u = new Underneath();
        final Events inner = new Events(), outer = new Events();
        final ForwardingPeerLink wrapper = new ForwardingPeerLink(u.link) {
            boolean nested;

            @Override
            protected void frameArrived(LinkListener listener, ByteBuffer frame) {
                if (!nested) {
                    nested = true;
                    poll(inner, 16);
                }
                super.frameArrived(listener, frame);
            }
        };
        wrapper.poll(outer, 16);
        assertEquals(5, inner.seen.size());
        assertEquals(5, outer.seen.size(), "the outer poll's events after the nested one still reach its listener: " + outer.seen);
    }

    @Test
    void aNullLinkOrListenerIsRefused() {
        assertThrows(NullPointerException.class, () -> new ForwardingPeerLink(null) {
        });
        final ForwardingPeerLink wrapper = new ForwardingPeerLink(new Underneath().link) {
        };
        assertThrows(NullPointerException.class, () -> wrapper.poll(null, 1));
    }

    private static Object argument(Class<?> type) {
        if (type == int.class) {
            return 1;
        } else if (type == long.class) {
            return 1L;
        } else if (type == byte[].class) {
            return new byte[] {1};
        } else if (type == int[].class) {
            return new int[] {0};
        } else if (type == ByteBuffer.class) {
            return ByteBuffer.wrap(new byte[] {1});
        }
        return null;
    }
}
