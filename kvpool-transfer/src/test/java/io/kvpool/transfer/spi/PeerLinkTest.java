package io.kvpool.transfer.spi;

import org.junit.jupiter.api.Test;

import java.lang.reflect.InvocationHandler;
import java.lang.reflect.Proxy;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.*;

/** What {@link PeerLink}'s default methods do for a link that implements only the abstract ones. */
class PeerLinkTest {

    @Test
    void theDefaultSendOfABufferHandsTheLinkACopyOfTheFrameBetweenPositionAndLimit() {
        final List<byte[]> sent = new ArrayList<>();
        final InvocationHandler h = (proxy, method, args) -> {
            if (method.isDefault()) {
                return InvocationHandler.invokeDefault(proxy, method, args);
            }
            if (method.getName().equals("send") && args[0] instanceof byte[] frame) {
                sent.add(frame);
                return null;
            }
            throw new UnsupportedOperationException(method.getName());
        };
        final PeerLink link = (PeerLink) Proxy.newProxyInstance(PeerLink.class.getClassLoader(), new Class<?>[] {PeerLink.class}, h);
        final ByteBuffer b = ByteBuffer.wrap(new byte[] {9, 9, 1, 2, 3, 9}).position(2).limit(5);
        link.send(b);
        assertEquals(1, sent.size());
        assertArrayEquals(new byte[] {1, 2, 3}, sent.get(0));
        assertEquals(2, b.position(), "the buffer is not moved");
        assertEquals(5, b.limit());
        b.put(2, (byte) 7);
        assertEquals(1, sent.get(0)[0], "the link got a copy: the caller may reuse its buffer");
    }
}
