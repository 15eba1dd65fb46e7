package provider

import (
	"fmt"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
)

func mirrorHCL(env accEnv, tenant string, paused bool) string {
	return env.adminProvider() + fmt.Sprintf(`
resource "meridian_topic" "orders" {
  tenant     = %[1]q
  name       = "orders"
  partitions = 1
}

resource "meridian_mirror" "west" {
  tenant        = %[1]q
  name          = "orders-west"
  source_region = meridian_topic.orders.region
  target_region = %[2]q
  topics        = [meridian_topic.orders.name]
  paused        = %[3]t

  delete_copies_on_destroy = true
}
`, tenant, env.otherRegion, paused)
}

// TestAccMirror: a mirror link between the two regions (created once its copy exists
// in the other region), paused and resumed in place, imported, and destroyed (once its
// workers stopped, then its copy, as delete_copies_on_destroy asks).
func TestAccMirror(t *testing.T) {
	env := testAccEnv(t)
	tenant := env.testTenant(t)
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProviders,
		CheckDestroy: func(*terraform.State) error {
			if err := env.expectGone(t, "mirrors/orders-west", tenantQuery(tenant)); err != nil {
				return err
			}
			return env.expectGone(t, "topics/"+escape(tenant+".orders"), map[string][]string{"region": {env.otherRegion}})
		},
		Steps: []resource.TestStep{
			{
				Config: mirrorHCL(env, tenant, false),
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("meridian_mirror.west", "status", "ready"),
					resource.TestCheckResourceAttr("meridian_mirror.west", "direction", "one-way"),
					func(*terraform.State) error {
						var copy topicJSON
						query := map[string][]string{"region": {env.otherRegion}}
						if err := env.apiGet(t, "topics/"+escape(tenant+".orders"), query, &copy); err != nil {
							return fmt.Errorf("the copy in %s: %w", env.otherRegion, err)
						}
						return nil
					},
				),
			},
			{
				Config: mirrorHCL(env, tenant, true),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("meridian_mirror.west", plancheck.ResourceActionUpdate),
				}},
				Check: func(*terraform.State) error {
					var link mirrorJSON
					if err := scoped(t, env, "mirrors", tenant, "orders-west", &link); err != nil {
						return err
					}
					if !link.Paused {
						return fmt.Errorf("API has the link unpaused: %+v", link)
					}
					return nil
				},
			},
			{ResourceName: "meridian_mirror.west", ImportState: true, ImportStateVerify: true,
				ImportStateVerifyIgnore: []string{"health", "delete_copies_on_destroy"}},
		},
	})
}
