package io.kvpool;

import net.jqwik.api.Example;
import net.jqwik.api.lifecycle.AroundPropertyHook;
import net.jqwik.api.lifecycle.PropagationMode;
import net.jqwik.api.lifecycle.PropertyExecutionResult;
import net.jqwik.api.lifecycle.PropertyExecutor;
import net.jqwik.api.lifecycle.PropertyLifecycleContext;

/**
 * Lets a longer run override the tries of kvpool's properties: {@code -Dkvpool.props.tries=5000}
 * (e.g. {@code ./dev mvn test -pl kvpool-api -Dtest='*Properties' -Dkvpool.props.tries=5000}).
 * Without it each property keeps the modest count in its annotation, sized for CI. Examples run once.
 */
public final class PropsTries implements AroundPropertyHook {

    static final String PROPERTY = "kvpool.props.tries";

    @Override
    public PropagationMode propagateTo() {
        return PropagationMode.ALL_DESCENDANTS; // registered on a container, it applies to the container's properties
    }

    @Override
    public PropertyExecutionResult aroundProperty(PropertyLifecycleContext context, PropertyExecutor property) {
        final Integer tries = Integer.getInteger(PROPERTY);
        if (tries != null && tries > 0 && !context.targetMethod().isAnnotationPresent(Example.class)) {
            context.attributes().setTries(tries);
        }
        return property.execute();
    }
}
