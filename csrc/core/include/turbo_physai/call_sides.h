// csrc/core/include/turbo_physai/call_sides.h: which side of a group transition a call is on.
#pragma once

#include <algorithm>
#include <iterator>
#include <vector>

namespace turbo_physai {

enum class Side { none, old_side, new_side };

/// The code identities of a group's objects before (old) and after (new) a transition.
///
/// While a group switches, each of its function locations holds a gate that asks where the
/// calling thread stands: a thread that is already inside one of the group's functions finishes
/// on the side it started on, so that the whole call sees one version of the group. "Inside" is
/// decided by the outermost frame of the thread's stack that runs one of the group's codes: a new
/// wrapper calling the original it wraps is a call on the new side. A code that both sides run
/// (an object kept by the replacement) tells nothing and is dropped from both sets.
///
/// `Code` is any pointer-like identity (PyCodeObject* in the bindings).
template <class Code>
class CallSides {
public:
    CallSides(std::vector<Code> old_codes, std::vector<Code> new_codes)
        : old_(unique(std::move(old_codes))), new_(unique(std::move(new_codes))) {
        std::vector<Code> shared;
        std::set_intersection(old_.begin(), old_.end(), new_.begin(), new_.end(),
                              std::back_inserter(shared));
        drop(old_, shared);
        drop(new_, shared);
    }

    Side side_of(Code code) const {
        if (std::binary_search(old_.begin(), old_.end(), code))
            return Side::old_side;
        if (std::binary_search(new_.begin(), new_.end(), code))
            return Side::new_side;
        return Side::none;
    }

    /// Side of the outermost matching frame; `walk(visit)` calls `visit(code)` for each frame of
    /// one thread's stack, innermost first.
    template <class Walk>
    Side outermost(Walk &&walk) const {
        Side found = Side::none;
        walk([&](Code code) {
            Side s = side_of(code);
            if (s != Side::none)
                found = s;
        });
        return found;
    }

    /// Where a gate sends a call: the side the thread is already on, else the transition's target.
    static bool routes_new(Side outermost, Side target) {
        return (outermost == Side::none ? target : outermost) == Side::new_side;
    }

    /// A thread holds a transition back while it runs a call that started on the side being left.
    static bool holds_back(Side outermost, Side target) {
        return outermost != Side::none && outermost != target;
    }

    bool empty() const { return old_.empty() && new_.empty(); }

private:
    static std::vector<Code> unique(std::vector<Code> codes) {
        std::sort(codes.begin(), codes.end());
        codes.erase(std::unique(codes.begin(), codes.end()), codes.end());
        return codes;
    }
    static void drop(std::vector<Code> &codes, const std::vector<Code> &shared) {
        std::vector<Code> kept;
        std::set_difference(codes.begin(), codes.end(), shared.begin(), shared.end(),
                            std::back_inserter(kept));
        codes = std::move(kept);
    }

    std::vector<Code> old_, new_;
};

}  // namespace turbo_physai
